"""What a listing cut short by a bound says (``admin/cuts.py``), on the dashboard and in the CLI:
the text search's scan window and a Redis walk's window, each with its way to lift the bound
(pure rendering of a ``Page``; the stores' side is in ``tests/stores``)."""

from __future__ import annotations

from celery_plus.admin import pages
from celery_plus.admin.cuts import cuts, unindexed_note
from celery_plus.admin.markup import Urls
from celery_plus.cli.admin import page_text
from celery_plus.model.admin import Page, Walked


def page(**fields: object) -> Page:
    return Page(items=[], total=0, page=1, per_page=50, state="enqueued", **fields)  # type: ignore[arg-type]


def test_a_page_nothing_cut_says_nothing() -> None:
    plain = page()
    assert cuts(plain) == []
    assert "walk" not in page_text(plain) and "searched" not in page_text(plain)
    html = pages.listing(Urls(), plain, pages.ListingView("enqueued"), "", None, True)
    assert 'id="walked"' not in html and 'id="searched"' not in html


def test_a_walk_cut_short_says_how_far_it_went_and_how_to_walk_them_all() -> None:
    cut = page(walked=Walked(50_000, 1_000_010))
    text = page_text(cut)
    assert ("listed among the first 50,000 of the 1,000,010 enqueued jobs only" in text
            and "(--walk-limit 0: all of them)" in text)
    view = pages.ListingView("enqueued", {"task": "billing.refund"})
    html = pages.listing(Urls(), cut, view, "", None, True)
    assert 'id="walked"' in html and "50,000 of the 1,000,010 enqueued jobs" in html
    assert 'href="/jobs/enqueued?task=billing.refund&amp;walk=all"' in html
    assert "walk" not in html.split('id="filter"')[1].split("</form>")[0]  # not a filter box


def test_both_windows_are_said_once_each() -> None:
    both = page(walked=Walked(5, 9), searched=3)
    assert [c.ident for c in cuts(both)] == ["walked", "searched"]
    text = page_text(both)
    assert text.count("(--walk-limit 0: all of them)") == 1
    assert "text searched in the first 3 enqueued jobs of the other filters only " \
        "(--text-limit 0: all of them)" in text


def test_a_walk_standing_in_for_an_index_being_built_says_so() -> None:
    building = Page(items=[], total=0, page=1, per_page=50, state="failed",
                    walked=Walked(50_000, 100_000, building=True))
    [cut] = cuts(building)
    assert cut.said.startswith("listed among the first 50,000 of the 100,000 failed jobs only")
    assert "still being built" in cut.said and cut.narrow == "narrow it with a time range"
    assert "still being built" not in cuts(page(walked=Walked(5, 9)))[0].said
    assert unindexed_note(0) == ""
    assert unindexed_note(1_500).startswith("1,500 dead letters are not in the per-queue counts")
