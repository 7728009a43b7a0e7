#!/usr/bin/env bash
# Session 10's second GPU call: the forged-inputs exploit with its document, the attention files the
# first call found wrong on the GPU (two correct files that did not compile, a wrong one that passed), the
# correct corpora again with the GPU-only long cases, and attention_backward's benchmark with its fixed peer.
#   bash scripts/gpu_round10.sh   (writes /tmp/r2 and $OUT/run2.tgz on the device machine)
export PYTHONUNBUFFERED=1; source scripts/gpu_setup.sh > /tmp/r2setup.txt 2>&1; R=/tmp/r2; mkdir -p $R
g() { timeout 280 python3 -m grader check "$2" --assignment "$1" --device cuda --json "$R/$1__$(basename $2 .py).json" "${@:3}" > "$R/$1__$(basename $2 .py).txt" 2>&1; echo "exit $? $1 $(basename $2)"; }
g softmax_backward tests/corpus/softmax_backward/exploits/forged_inputs_after.py &
g attention_backward tests/corpus/attention_backward/correct/tutorial06_bwd.py &
g attention_backward tests/corpus/attention_backward/correct/inline_delta_exp2.py &
g attention_forward tests/corpus/attention_forward/wrong/no_rescale.py &
wait
for f in prescaled_q_head_loop tutorial06_block_pointers two_pass_lse; do g attention_forward tests/corpus/attention_forward/correct/$f.py & done
g attention_backward tests/corpus/attention_backward/correct/atomic_dq.py &
g attention_forward grader/assignments/attention_forward/reference.py &
wait
g attention_backward grader/assignments/attention_backward/reference.py --benchmark on
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob('/tmp/r2/*.json')):
    d = json.load(open(f)); print(f.split('/')[-1], d['verdict'], [c['name'] for c in d['checks'] if not c['passed'] and not c.get('skipped')])
d = json.load(open('/tmp/r2/softmax_backward__forged_inputs_after.json'))
for c in d['checks']:
    if c['name'] in ('output_contract', 'triton_kernel'): print(c['name'], c['passed'], c['message'][:600])
b = json.load(open('/tmp/r2/attention_backward__reference.json'))['benchmark']
print(b['headline'])
for r in b['rows']: print(r['id'], {k: (v.get('graph') or {}).get('median_s') or str(v.get('error'))[:80] for k, v in r['impls'].items()})
PY
tar czf $OUT/run2.tgz -C /tmp r2
