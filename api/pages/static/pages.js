// Kernel grader pages: progressive enhancement only. Every page works without this file;
// with it, the upload page also takes a dropped file, and live status polls (htmx,
// hx-trigger) back off when the server is busy.
(function () {
  "use strict";
  document.documentElement.classList.remove("no-js");
  document.documentElement.classList.add("js");

  function setUpDropzone() {
    var zone = document.getElementById("dropzone");
    if (!zone) return;
    var input = document.getElementById(zone.getAttribute("data-for"));
    var said = zone.querySelector(".dropped");
    zone.hidden = false;
    function show(files) {
      said.textContent = files && files.length ? "Chosen: " + files[0].name : "";
    }
    ["dragenter", "dragover"].forEach(function (name) {
      zone.addEventListener(name, function (event) {
        event.preventDefault();
        zone.classList.add("over");
      });
    });
    ["dragleave", "drop"].forEach(function (name) {
      zone.addEventListener(name, function () { zone.classList.remove("over"); });
    });
    zone.addEventListener("drop", function (event) {
      event.preventDefault();
      var files = event.dataTransfer && event.dataTransfer.files;
      if (!files || !files.length) return;
      input.files = files;
      input.dispatchEvent(new Event("change"));  // shown, and its size checked
    });
    input.addEventListener("change", function () { show(input.files); });
  }

  // A file over the upload limit is refused here, before a byte is sent, and stays chosen
  // (the server's 413 page is the guarantee; a new page cannot keep a chosen file).
  function setUpSizeCheck() {
    var input = document.querySelector("input[type=file][data-max-bytes]");
    if (!input) return;
    var limit = parseInt(input.getAttribute("data-max-bytes"), 10);
    var said = document.getElementById("file-size-error");
    function check() {
      var file = input.files && input.files[0];
      var message = "";
      if (file && file.size > limit) {
        message = file.name + " is " + Math.round(file.size / 1024) + " KiB: larger than the " +
          "upload limit of " + input.getAttribute("data-max-text") + ". Choose a smaller file.";
      }
      input.setCustomValidity(message);
      if (said) {
        said.textContent = message;
        said.hidden = !message;
      }
      return !message;
    }
    input.addEventListener("change", check);
    input.form.addEventListener("submit", function (event) {
      if (!check()) event.preventDefault();
    });
  }

  // Live polls (hx-trigger="every Ns") back off when the server is busy: after a 503, 502,
  // 504 or no answer, the element skips its polls for Retry-After seconds plus a random
  // jitter whose bound doubles with each failure (at most 60 s); an answer resets it (a
  // successful poll replaces the element). docs/reliability.md, "Client".
  var pausedUntil = new WeakMap();
  var failures = new WeakMap();
  document.addEventListener("htmx:beforeRequest", function (event) {
    var until = pausedUntil.get(event.detail.elt);
    if (until && Date.now() < until) event.preventDefault();
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var elt = event.detail.elt;
    var xhr = event.detail.xhr;
    var status = xhr ? xhr.status : 0;
    if (status === 0 || status === 502 || status === 503 || status === 504) {
      var count = (failures.get(elt) || 0) + 1;
      failures.set(elt, count);
      var after = parseInt(xhr ? xhr.getResponseHeader("Retry-After") : "", 10);
      var wait = (isNaN(after) ? 0 : after) + Math.random() * Math.min(60, 2 * Math.pow(2, count));
      pausedUntil.set(elt, Date.now() + wait * 1000);
    } else {
      failures.delete(elt);
      pausedUntil.delete(elt);
    }
  });

  function setUp() {
    setUpDropzone();
    setUpSizeCheck();
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUp);
  } else {
    setUp();
  }
})();
