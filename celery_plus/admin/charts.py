"""The overview's chart and the queue history's, drawn on the server as inline SVG (the pages
allow no script).

The overview's: one bar pair per time bucket, completed (green) and failed (red), stacked,
with the scale, the time axis and a ``<title>`` per bucket (a browser shows it on hover).
Only numbers and fixed words go into the SVG; the text it carries is escaped like any page
text. The queue history's (:func:`series_svg`): one value per sample, a bar at the sample's time.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Sequence

from celery_plus.model.admin import Activity

WIDTH, HEIGHT = 720, 180
LEFT, BOTTOM, TOP = 44, 22, 8
COMPLETED, FAILED = "#3a8d3a", "#c23b3b"


def _clock(ms: int, with_date: bool) -> str:
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    return moment.strftime("%m-%d %H:%M" if with_date else "%H:%M")


def _nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50 ... at least ``value`` (at least 1)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def activity_svg(activity: Activity) -> str:
    """Completed and failed jobs per bucket as an inline ``<svg>`` element."""
    buckets = activity.buckets
    top = _nice_ceiling(max((c + f for c, f in buckets), default=0))
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - BOTTOM - TOP
    slot = plot_w / max(len(buckets), 1)
    bar = max(slot * 0.8, 1.0)
    bucket_ms = activity.bucket_s * 1000
    with_date = activity.bucket_s * len(buckets) > 86400
    parts = _frame("activity", f"completed and failed jobs per {activity.bucket_s} s", top)
    for n, (completed, failed) in enumerate(buckets):
        x = LEFT + n * slot + (slot - bar) / 2
        start = activity.since_ms + n * bucket_ms
        label = html.escape(f"{_clock(start, True)} UTC: {completed} completed, {failed} failed")
        h_done = plot_h * completed / top
        h_fail = plot_h * failed / top
        base = TOP + plot_h
        parts.append(f'<g class="bucket"><title>{label}</title>')
        if completed:
            parts.append(f'<rect class="completed" x="{x:.1f}" y="{base - h_done:.1f}" '
                         f'width="{bar:.1f}" height="{h_done:.1f}" fill="{COMPLETED}"/>')
        if failed:
            parts.append(f'<rect class="failed" x="{x:.1f}" y="{base - h_done - h_fail:.1f}" '
                         f'width="{bar:.1f}" height="{h_fail:.1f}" fill="{FAILED}"/>')
        parts.append("</g>")
    ticks = 6
    for n in range(ticks + 1):
        index = round(n * len(buckets) / ticks)
        x = LEFT + index * slot
        anchor = "start" if n == 0 else "end" if n == ticks else "middle"
        parts.append(f'<text x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="{anchor}" fill="#555">'
                     f"{_clock(activity.since_ms + index * bucket_ms, with_date)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _frame(ident: str, title: str, top: int) -> list[str]:
    """The opening of a chart's ``<svg>``: its id and ``<title>``, and the scale's three lines
    (0, half and ``top``) across the plot."""
    plot_h = HEIGHT - BOTTOM - TOP
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{html.escape(ident)}" role="img" '
             f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'font-family="sans-serif" font-size="10"><title>{html.escape(title)}</title>']
    for fraction in (0, 0.5, 1):
        y = TOP + plot_h * (1 - fraction)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - 4}" y2="{y:.1f}" '
                     'stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 4}" y="{y + 3:.1f}" text-anchor="end" fill="#555">'
                     f"{round(top * fraction)}</text>")
    return parts


def series_svg(ident: str, title: str, points: Sequence[tuple[int, float | None]],
               since_ms: int, until_ms: int, step_ms: int, unit: str, color: str) -> str:
    """One value over time as an inline ``<svg>``: a bar per sample at its time (``step_ms``
    wide; a missing value: no bar), the scale in ``unit`` and a ``<title>`` per sample."""
    top_value = max((v for _, v in points if v is not None), default=0.0)
    top = _nice_ceiling(int(-(-top_value // 1)))
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - BOTTOM - TOP
    span = max(until_ms - since_ms, 1)
    bar = max(plot_w * step_ms / span * 0.8, 1.0)
    with_date = span > 86_400_000
    parts = _frame(ident, title, top)
    base = TOP + plot_h
    for at, value in points:
        if value is None or not since_ms <= at <= until_ms:
            continue
        x = LEFT + plot_w * (at - since_ms) / span - bar
        h = plot_h * value / top
        label = html.escape(f"{_clock(at, True)} UTC: {value:g} {unit}")
        parts.append(f'<g class="sample"><title>{label}</title><rect x="{max(x, LEFT):.1f}" '
                     f'y="{base - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                     f'fill="{color}"/></g>')
    ticks = 6
    for n in range(ticks + 1):
        x = LEFT + plot_w * n / ticks
        anchor = "start" if n == 0 else "end" if n == ticks else "middle"
        parts.append(f'<text x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="{anchor}" fill="#555">'
                     f"{_clock(since_ms + span * n // ticks, with_date)}</text>")
    parts.append("</svg>")
    return "".join(parts)
