"""Every SQL statement of the service, one module per resource. Functions flush but never
commit: the transaction belongs to the caller (the request dependency in api/deps.py, the
worker's job wrapper, or a CLI command).

Callers import the package (``from submissions import repository``) and call
``repository.<function>``; every public name of the modules below is re-exported here.

- `students`, `staff`: people and their token hashes.
- `assignments`: per-assignment settings rows.
- `submissions`: uploads, their listing, rate-limit counts, disqualification.
- `queue`: the job queue over ``gradings`` (claim, lease, expiry, results); its docstring
  explains why a job is claimed and finalised exactly once.
- `regrades`, `final_runs`: gradings staff add to submissions.
- `extensions`: students' extensions of due dates.
- `slip_days`: slip-day budgets and spends; the check verdicts per-check points read.
- `standings`: the queries behind the leaderboard and the grade exports.
- `audit`: the staff action log.
- `idempotency`: stored first answers of POSTs sent with an Idempotency-Key.
- `workers`, `observability`: heartbeats, health and metrics.
- `leases`: named leases one process at a time holds (the scheduled LMS sync's).
- `analytics`: the check verdicts behind the staff's class analytics.
- `lti`: LTI 1.3 registrations, keys, launches, identities, line items and score syncs.
- `similarity`: similarity review's known sources, runs (a queue of their own) and pairs.
"""

from submissions.repository.analytics import *  # noqa: F403
from submissions.repository.assignments import *  # noqa: F403
from submissions.repository.audit import *  # noqa: F403
from submissions.repository.extensions import *  # noqa: F403
from submissions.repository.final_runs import *  # noqa: F403
from submissions.repository.idempotency import *  # noqa: F403
from submissions.repository.leases import *  # noqa: F403
from submissions.repository.lti import *  # noqa: F403
from submissions.repository.observability import *  # noqa: F403
from submissions.repository.queue import *  # noqa: F403
from submissions.repository.regrades import *  # noqa: F403
from submissions.repository.similarity import *  # noqa: F403
from submissions.repository.slip_days import *  # noqa: F403
from submissions.repository.staff import *  # noqa: F403
from submissions.repository.standings import *  # noqa: F403
from submissions.repository.students import *  # noqa: F403
from submissions.repository.submissions import *  # noqa: F403
from submissions.repository.workers import *  # noqa: F403
