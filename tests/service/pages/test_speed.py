"""A GPU grading's speed against the floor on the submission page (api/pages/report.py,
grader/report/speed.py), on SQLite and PostgreSQL, from the result document the real grader wrote on
an H200 for the softmax_backward reference (docs/benchmarks/h200-20261201-round6/
run3-diagnosis/B2.json), stored as the worker stores it."""

from __future__ import annotations

import dataclasses
import html
import re
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from grader.report.document import ResultDocument

from ..helpers import create_student, grade_next, kernel_source, make_outcome, upload
from .test_pages import sign_in

RECORDED = (Path(__file__).resolve().parents[3] / "docs" / "benchmarks" / "h200-20261201-round6"
            / "run3-diagnosis" / "B2.json")


def recorded_outcome() -> Any:
    """The outcome the worker builds from the recorded document (submissions/grading.py)."""
    document = ResultDocument.model_validate_json(RECORDED.read_text())
    stored = document.model_dump(mode="json", by_alias=True)
    return dataclasses.replace(
        make_outcome("passed", speedup=document.headline_value), result_document=stored,
        benchmark=stored["benchmark"], device=document.device, checks=[])


def _speed_rows(page: str) -> dict[str, list[str]]:
    table = re.search(r'<table class="speeds">(.*?)</table>', page, re.S).group(1)
    rows = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.split("<tbody>")[1], re.S):
        name = re.sub(r"<[^>]+>", "", re.search(r"<th[^>]*>(.*?)</th>", row, re.S).group(1)).strip()
        rows[name] = [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
                      for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    return rows


def test_the_report_shows_every_rows_rate_and_fraction_of_the_floor(client: TestClient, db_session: Any) -> None:
    _, ada = create_student(client, "ada")
    submission_id = upload(client, ada, kernel_source()).json()["id"]
    grade_next(db_session, recorded_outcome())
    sign_in(client, ada)
    page = client.get(f"/submissions/{submission_id}").text

    rows = _speed_rows(page)
    assert len(rows) == 12
    assert rows["65536x256/float32"] == ["49.3 µs", "4082 GB/s", "96%", "47.3 µs (bandwidth)",
                                         "4255 GB/s copy bandwidth"]
    assert rows["256x131072/float32"][1:3] == ["2660 GB/s", "63%"]
    assert page.count('<tr class="furthest">') == 3

    summary = re.search(r'<section aria-labelledby="summary-heading".*?</section>', page, re.S).group(0)
    named = re.findall(r"<li><strong>(.*?)</strong>: (\d+%) of the floor \((.*?)\)</li>", summary)
    assert named == [("256x131072/float32", "63%", "2660 GB/s"), ("256x131072/bfloat16", "63%", "2684 GB/s"),
                     ("256x131072/float16", "64%", "2703 GB/s")]

    chart = re.search(r'<svg class="bars speed wide-only"[^>]*aria-label="([^"]*)"(.*?)</svg>', page, re.S)
    label = html.unescape(chart.group(1))
    assert label.startswith("Fraction of the floor per row (higher is better, 100% is the floor): "
                            "65536x256/float32: 96% · 4082 GB/s;")
    assert chart.group(2).count('class="bar bar-student') == 12
    assert chart.group(2).count("bar-furthest") == 3
    phone = re.search(r'<svg class="bars speed narrow-only"[^>]*aria-label="([^"]*)"', page, re.S)
    assert html.unescape(phone.group(1)) == label  # the phone's layout says the same


def test_a_cpu_grading_has_no_speed_section(client: TestClient, db_session: Any) -> None:
    _, ada = create_student(client, "ada")
    submission_id = upload(client, ada, kernel_source()).json()["id"]
    grade_next(db_session, make_outcome("passed"))
    sign_in(client, ada)
    page = client.get(f"/submissions/{submission_id}").text
    assert 'class="speeds"' not in page and "Furthest from the floor" not in page


def test_the_chart_scales_past_the_floor_and_says_why_a_row_has_no_bar() -> None:
    from api.pages.charts import speed_chart
    from grader.report.speed import RowSpeed

    gemm = RowSpeed(row="4096x4096x4096/float16", floor_kind="roofline", student_s=2e-4, floor_s=1e-4,
                    bytes=100_663_296, flops=137_438_953_472, bytes_per_s=5.0331648e11,
                    flops_per_s=6.8719476736e14, fraction_of_floor=0.5, ranked=True)
    fast = gemm.model_copy(update={"row": "128x4096x4096/float16", "fraction_of_floor": 1.1, "ranked": False})
    untimed = RowSpeed(row="8192x8192x8192/float16", missing="not timed")
    wide = speed_chart([gemm, fast, untimed], [gemm])
    assert [tick for _, tick in wide.ticks] == ["0%", "25%", "50%", "75%", "100%", "125%"]
    assert [bar.text for bar in wide.bars] == ["50% · 503 GB/s, 687 TFLOP/s",
                                               "110% · 503 GB/s, 687 TFLOP/s (not ranked)", "not timed (not ranked)"]
    assert [bar.furthest for bar in wide.bars] == [True, False, False]
    assert wide.bars[1].width > wide.floor_x - wide.plot_x  # drawn past the floor line
    assert wide.bars[0].text_x > wide.floor_x  # values stay clear of the floor line
    compact = speed_chart([gemm], compact=True)
    assert compact.bars[0].text == "50% · 687 TFLOP/s" and compact.width == 360
    assert speed_chart([untimed]) is None
