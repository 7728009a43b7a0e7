"""Writes a complete set of forged reports (every call "ok" with a kernel launch, every
rejection "raised") and a done.json saying the run finished, then leaves with os._exit(0)
while being imported, before a single call is made.

Expected: verdict error, error.kind exited (the submission never ran a call). At the very
least it must not pass: no output tensor exists, so every value check fails.
"""
import json
import os

with open("plan.json", encoding="utf-8") as handle:
    _plan = json.load(handle)
for _index, _step in enumerate(_plan["steps"]):
    _reports = []
    for _call in _step["calls"]:
        for _id in [_call["id"]] + [f"{_call['id']}@{i + 1}" for i in range(len(_call.get("refills", [])))]:
            if _id.startswith("rejects_"):
                _reports.append({"id": _id, "status": "raised", "launches": 0,
                                 "exception": {"type": "ValueError", "message": "no", "exit": False}})
            else:
                _reports.append({"id": _id, "status": "ok", "launches": 1,
                                 "out": {"shape": _call["args"][0]["size"], "dtype": "float32", "device": "cpu",
                                         "contiguous": True, "aliases_input": False, "requires_grad": False}})
    with open(f"step_{_index}.json", "w", encoding="utf-8") as handle:
        json.dump({"check": _step["check"], "calls": _reports}, handle)
with open("done.json", "w", encoding="utf-8") as handle:
    json.dump({"phase": "done"}, handle)
os._exit(0)


def softmax_backward(y, g):
    return y
