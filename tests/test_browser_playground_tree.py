"""The playground's generation tree in Chromium (app/components/generation_player.js): a token's
alternatives and logit lens show on a click, Force branches the generation, and the tree drawing
shows the new path where it leaves the first. Reference: the library's own tree, built here with
the same settings (model.generate(tree=True), then Tree.branch with the token the page forced)."""

import re

import pytest
from playwright.sync_api import expect

import glassbox as gb
from tests.browser import settled

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]


def test_force_an_alternative_and_see_the_branch(app_url, page):
    page.goto(app_url + "/playground?prompt=Tom+had+a&max_new=8&seed=3")
    settled(page)
    page.locator(".gb-sampling").get_by_role("button", name="Generate").click()
    player = page.locator(".gb-generation")
    expect(player).to_have_attribute("data-paths", "1", timeout=120_000)
    player.get_by_role("button", name=re.compile(r"^3: ")).click()
    expect(player).to_have_attribute("data-step", "2")
    expect(player).to_contain_text("Alternatives at position 5")
    expect(player).to_contain_text("Logit lens for position 5")
    row = player.locator(".gb-alternatives tr", has=page.get_by_role("button", name="Force")).first
    forced = row.locator("td").first.inner_text().replace("\u2423", " ")  # the page writes a space as ␣
    row.get_by_role("button", name="Force").click()
    expect(page.locator(".gb-generation")).to_have_attribute("data-paths", "2", timeout=120_000)
    player = page.locator(".gb-generation")
    expect(player).to_have_attribute("data-path", "1")
    tree = gb.load("default").generate("Tom had a", 8, seed=3, tree=True)
    branch = tree.branch(5, forced)
    # the drawing: path 2's own tokens start at the forced one (column 3); the chips are path 2's
    nodes = player.locator(".gb-tree-node[data-path='1']")
    expect(nodes).to_have_count(8 - 2)
    expect(nodes.first).to_have_attribute("data-step", "2")
    chips = [t.replace("\u00a0", " ") for t in player.locator(".gb-chip").all_inner_texts()]
    assert chips == [s.token for s in branch.steps]
    assert page.locator("[data-testid='stException']").count() == 0
