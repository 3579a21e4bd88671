"""What a listing that a bound cut short says, written once for the dashboard and the CLI.

Two bounds keep a listing's reads in milliseconds on a large store, and each is said the same
way: what was looked at, and how to lift the bound (the dashboard's link, the CLI's option;
the API's argument is the one the bound came from):

* the **text search's scan window** (``Page.searched``: ``text_limit``): the text is looked
  for in the first candidates of the other filters only;
* the **walk's window** (``Page.walked``: ``walk_limit``): a task or time filter over more
  than 10,000 waiting jobs on Redis walks the queue indexes (no index by task there), and
  looks at the first jobs of the listing's order only (docs/admin.md "Cost"); so does a task
  or queue filter over the dead letters (or other finished jobs) of a Redis store whose
  listing index is still being built (``Walked.building``: a store an earlier release wrote).
"""

from __future__ import annotations

from dataclasses import dataclass

from celery_plus.model.admin import Page

#: Waiting jobs a walk looks at unless told otherwise (the dashboard's and the CLI's window;
#: the API's ``walk_limit`` is None, all, unless given): 0.18 s on a quiet machine, 0.27-0.30 s
#: at load 6-10 (docs/admin.md "Search at a million jobs").
WALK_WINDOW = 50_000


@dataclass(frozen=True)
class Cut:
    """One bound that cut a listing short, in words."""

    #: The dashboard's element id.
    ident: str
    #: What the listing looked at.
    said: str
    #: How to narrow the listing instead.
    narrow: str
    #: The words of the dashboard's link that lifts the bound.
    lift: str
    #: The dashboard's query parameter (name, value) that lifts it.
    param: tuple[str, str]
    #: The CLI's option that lifts it.
    option: str


def cuts(page: Page) -> list[Cut]:
    """The bounds that cut ``page`` short."""
    out = []
    if page.walked is not None:
        w = page.walked
        why, narrow = (
            ("this store's index of them by task and queue is still being built, so the "
             "filter walks them", "narrow it with a time range")
            if w.building else
            ("on Redis a task or time filter walks the queues", "narrow it with a queue"))
        out.append(Cut(
            "walked", f"listed among the first {w.examined:,} of the {w.of:,} {page.state} "
            f"jobs only ({why}; the rest were not looked at)", narrow, "walk them all",
            ("walk", "all"), "--walk-limit 0"))
    if page.searched is not None:
        out.append(Cut(
            "searched", f"text searched in the first {page.searched:,} {page.state} jobs of "
            "the other filters only", "narrow it with task, queue or a time range",
            "search them all", ("search", "all"), "--text-limit 0"))
    return out


def unindexed_note(dead_letters: int) -> str:
    """What the per-queue counts (``Status.unindexed``) leave out, in words ('' for none)."""
    if not dead_letters:
        return ""
    return (f"{dead_letters:,} dead letters are not in the per-queue counts yet (this store's "
            "index of them by queue is still being built; the workers build it)")
