// Kernel grader pages: progressive enhancement only. Every page works without this file;
// with it, the upload page also takes a dropped file. Live status is htmx (hx-trigger).
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
      show(files);
    });
    input.addEventListener("change", function () { show(input.files); });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUpDropzone);
  } else {
    setUpDropzone();
  }
})();
