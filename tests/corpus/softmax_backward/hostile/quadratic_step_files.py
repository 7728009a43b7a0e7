"""Leaves step files whose reading was quadratic: step_0.json with 100,000 call reports and
step_0.safetensors whose header lists 200,000 empty tensors, then exits during its import. A
parent that matched every tensor name against every call report spent about 1,360 CPU s a step
(2e10 pairs) and was ended by its own alarm, an infrastructure failure retried three times.

Expected: verdict error (tampered: more tensors than the step can hold), exit 2, within the
child's limit plus a few seconds.
"""
import json
import os

calls = [{"id": f"c{i}", "status": "ok"} for i in range(100_000)]
with open("step_0.json", "w") as handle:
    json.dump({"check": "x", "calls": calls}, handle)
header = {f"c{i}:base_after:b{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(200_000)}
raw = json.dumps(header).encode()
with open("step_0.safetensors", "wb") as handle:
    handle.write(len(raw).to_bytes(8, "little") + raw)
os._exit(0)


def softmax_backward(y, g):
    return y
