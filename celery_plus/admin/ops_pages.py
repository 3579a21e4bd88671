"""The dashboard's operator pages: dead letters grouped by error (``/errors``), one group's
dead letters (``/errors/jobs``) and their confirmations, the per-task breakdown (``/tasks``),
queue depth and wait over time (``/history``);
built from ``markup.py``'s blocks, with the same rules as ``pages.py`` (every value escaped;
action forms only with the operator's token).
"""

from __future__ import annotations

from celery_plus.admin.charts import series_svg
from celery_plus.admin.markup import (
    Urls,
    attr,
    cell,
    e,
    hidden_fields,
    message,
    table,
    token_field,
)
from celery_plus.admin.queue_history import DEFAULT_RANGE, RANGES, QueueHistory
from celery_plus.admin.task_stats import WINDOWS, TaskBreakdown
from celery_plus.admin.text import age, when
from celery_plus.model.admin import Page
from celery_plus.model.capped import count_text
from celery_plus.model.error_groups import MESSAGE_CHARS, ErrorGroup, ErrorGroups

#: Samples the history page lists (the newest).
HISTORY_ROWS = 15
#: Verbs of a group action.
GROUP_VERBS = {"retry": "Retry", "discard": "Discard"}


def group_url(urls: Urls, exc_type: str, message_text: str, **query: object) -> str:
    # An empty message is sent as a key of its own (Urls drops empty values).
    return urls("/errors/jobs", type=exc_type, message=message_text,
                empty="1" if not message_text else None, **query)


def _group_forms(urls: Urls, g_type: str, g_message: str, count: str, token: str,
                 ident: str) -> str:
    fields = token_field(token) + hidden_fields({"type": g_type, "message": g_message})
    if not g_message:
        fields += hidden_fields({"empty": "1"})
    return "".join(
        f'<form method="post" action="{attr(urls(f"/errors/{action}"))}">{fields}'
        f'<button id="{attr(f"group-{action}-{ident}")}">{e(action)} all {e(count)}</button>'
        "</form> " for action in GROUP_VERBS)


def errors_page(urls: Urls, found: ErrorGroups, msg: str, token: str | None) -> str:
    """Every group: how many dead letters, the newest and oldest, a link to them, and (for
    the operator) retry all / discard all."""
    out = message(msg)
    if found.unindexed:
        out += (f'<p class="warn" id="unindexed">{found.unindexed:,} newer dead letters are '
                "not counted yet: the group index is being built, a part per load (reload "
                "to count more; a group's page and actions read them all)</p>")
    if not found.groups:
        return out + ("" if found.unindexed else "<p id=\"no-groups\">no dead letters</p>")
    rows = []
    for n, g in enumerate(found.groups, 1):
        link = f'<a href="{attr(group_url(urls, g.exc_type, g.message))}" id="group-{n}">'
        cells = [e(count_text(g.count)), link + (cell(g.exc_type, 80) or "(no type)") + "</a>",
                 cell(g.message, MESSAGE_CHARS) or "(no message)", e(when(g.newest_ms)),
                 e(when(g.oldest_ms))]
        if token is not None:
            cells.append(_group_forms(urls, g.exc_type, g.message, count_text(g.count),
                                      token, str(n)))
        rows.append(cells)
    headers = ["dead letters", "exception type", "message (first line)", "newest (UTC)",
               "oldest (UTC)"] + (["act on the group"] if token is not None else [])
    more = (f"<p>the {len(found.groups)} largest of {found.total:,} groups</p>"
            if len(found.groups) < found.total else "")
    if found.sampled:
        more += (f'<p class="warn" id="sampled">groups found among the newest '
                 f"{found.sampled - 1:,} dead letters (an older group with none of them is "
                 "not listed); counts over 10,000 are shown 10000+</p>")
    return (out + "<p>Dead letters grouped by exception type and the first line of the "
            f"message (its first {MESSAGE_CHARS} characters).</p>"
            + table(headers, rows, ident="groups") + more)


def group_jobs_page(urls: Urls, g_type: str, g_message: str, page: Page, msg: str,
                    token: str | None) -> str:
    out = message(msg) + (f"<p>exception type <b>{cell(g_type, 200)}</b>, message "
                          f"<b>{cell(g_message, MESSAGE_CHARS)}</b>: "
                          f"<span id=\"group-total\">{e(count_text(page.total))}</span> "
                          "dead letters</p>")
    if token is not None and page.total:
        out += '<div class="bulk">' + _group_forms(urls, g_type, g_message,
                                                   count_text(page.total), token, "this") + \
            "</div>"
    rows = [[f'<a href="{attr(urls.job(r.id))}">{cell(r.id, 80)}</a>', cell(r.name, 80),
             cell(r.queue, 60), e(when(r.at_ms)), e(r.deliveries),
             cell(f"{r.exc_type}: {r.exc_message}")] for r in page.items]
    out += table(["task id", "task", "queue", "failed (UTC)", "deliveries", "error"], rows,
                 ident="jobs")
    links = []
    for number, label in ((page.page - 1, "newer"), (page.page + 1, "older")):
        if 1 <= number <= page.pages:
            href = group_url(urls, g_type, g_message, page=number)
            links.append(f'<a href="{attr(href)}" id="page-{label}">{e(label)}</a>')
    return out + f'<p class="pages">page {e(page.page)} of {e(max(page.pages, 1))} ' \
                 f'{" ".join(links)}</p>'


def confirm_group(urls: Urls, action: str, g_type: str, g_message: str, count: int,
                  token: str) -> str:
    fields = token_field(token) + hidden_fields(
        {"type": g_type, "message": g_message, "confirm": "1"})
    if not g_message:
        fields += hidden_fields({"empty": "1"})
    return (f'<p class="warn" id="question">{e(GROUP_VERBS[action])} all '
            f"{e(count_text(count))} dead letters of {cell(g_type, 200)}: "
            f"{cell(g_message, MESSAGE_CHARS)}?</p><p>Oldest first, in batches of 500; dead "
            "letters of this group that die after you confirm are left for next time.</p>"
            f'<form method="post" action="{attr(urls(f"/errors/{action}"))}">{fields}'
            f'<button id="confirm">{e(action)}</button></form> '
            f'<a href="{attr(group_url(urls, g_type, g_message))}" id="back">no, go back</a>')


def group_label(g: ErrorGroup) -> str:
    return f"{g.exc_type}: {g.message}"


def _ms(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value} ms" if value < 1000 else f"{value / 1000:.2f} s"


def tasks_page(urls: Urls, found: TaskBreakdown, window: str) -> str:
    """The per-task breakdown with its window choices and what was sampled."""
    choices = " ".join(f"<b>{e(name)}</b>" if name == window else
                       f'<a href="{attr(urls("/tasks", window=name))}" id="window-{e(name)}">'
                       f"{e(name)}</a>" for name in WINDOWS)
    rows = []
    for t in found.tasks:
        rate = "-" if t.failure_rate is None else f"{t.failure_rate:.1%}"
        rows.append([f'<a href="{attr(urls.jobs("failed", task=t.name))}">{cell(t.name, 120)}'
                     "</a>", e(f"{t.waiting:,}"), e(f"{t.running:,}"), e(f"{t.succeeded:,}"),
                     e(f"{t.failed:,}"), e(count_text(t.dead)), e(rate), e(_ms(t.p50_ms)),
                     e(_ms(t.p95_ms))])
    note = (f"<p>Succeeded, failed, failure rate and runtimes (start to finish): jobs that "
            f"finished in the last {e(window)}, the newest {found.sample:,} of each; waiting "
            f"and running: the newest {found.sample:,} jobs of each state; dead: dead letters "
            "now, whenever they died.</p>")
    if found.sampled:
        note += (f'<p class="warn" id="sampled">more jobs than read in: '
                 f"{e(', '.join(found.sampled))} (figures of the newest {found.sample:,} "
                 "only)</p>")
    return (f"<p>window: {choices}</p>{note}" + table(
        ["task", "waiting", "running", "succeeded", "failed", "dead", "failure rate",
         "p50 runtime", "p95 runtime"], rows, ident="tasks"))


def history_page(urls: Urls, found: QueueHistory, range_key: str) -> str:
    """Queue depth and the oldest job's wait over time: the queue and range choices, a chart
    of each, and the newest samples as a table."""
    def link(queue: str | None, key: str) -> str:
        return urls("/history", queue=queue, range=None if key == DEFAULT_RANGE else key)

    ranges = " ".join(f"<b>{e(name)}</b>" if name == range_key else
                      f'<a href="{attr(link(found.queue, name))}" id="range-{e(name)}">'
                      f"{e(name)}</a>" for name in RANGES)
    queues = " ".join(
        f"<b>{cell(q or 'every queue', 60)}</b>" if q == found.queue else
        f'<a href="{attr(link(q, range_key))}" class="queue">{cell(q or "every queue", 60)}</a>'
        for q in [None, *found.queues])
    step_ms = found.step_s * 1000
    depth = series_svg("depth", "jobs enqueued", [(p.at_ms, p.waiting) for p in found.points],
                       found.since_ms, found.now_ms, step_ms, "jobs enqueued", "#3a6d8d")
    wait = series_svg("wait", "oldest job's wait (s)",
                      [(p.at_ms, p.oldest_wait_s) for p in found.points], found.since_ms,
                      found.now_ms, step_ms, "s waited by the oldest", "#8d6d3a")
    rows = [[e(when(p.at_ms)) + (" (now)" if p.live else ""), e(f"{p.waiting:,}"),
             e("-" if p.oldest_wait_s is None else age(p.oldest_wait_s))]
            for p in reversed(found.points[-HISTORY_ROWS:])]
    recorded = sum(1 for p in found.points if not p.live)
    note = (f"<p>{recorded:,} samples recorded in the last {e(range_key)} (one a minute, taken "
            "by the worker whose maintenance turn it is; none while no worker runs), and one "
            "taken now. Enqueued: ready jobs no worker claimed yet (scheduled, blocked and "
            "running ones are not counted).</p>")
    return (f"<p>queue: {queues}</p><p>last {ranges}</p>{note}"
            f"<h2>Jobs enqueued</h2>{depth}<h2>Oldest job's wait</h2>{wait}"
            f"<h2>Newest samples</h2>"
            + table(["sampled", "enqueued", "oldest waited"], rows, ident="history"))
