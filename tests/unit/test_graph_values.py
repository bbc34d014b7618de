"""Values in graph definitions: $ref, $template, paths, and what they may reference."""

from __future__ import annotations

import pytest

from plait.graph.errors import GraphValueError
from plait.graph.values import (
    Scope,
    check_syntax,
    format_path,
    get_path,
    parse_path,
    parse_template,
    references,
    resolve,
)

TRIGGER = {"name": "Ada", "email": "ada@example.com", "tags": ["a", "b"], "a.b": 7}
NODES = {
    "create": {"id": 42, "profile": {"city": "Paris"}, "items": [{"sku": "x"}, {"sku": "y"}]},
    "flag": True,
}
SCOPE = Scope(trigger=TRIGGER, nodes=NODES, state={"count": 3, "cfg": {"mode": "fast"}}, node="n")


def ref(root: str, path: str | None = None, **extra: object) -> dict[str, object]:
    value: dict[str, object] = {"$ref": root, **extra}
    if path is not None:
        value["path"] = path
    return value


# -- $ref -------------------------------------------------------------------------------


def test_ref_to_trigger_whole_and_by_path() -> None:
    assert resolve(ref("trigger"), SCOPE) == TRIGGER
    assert resolve(ref("trigger", "email"), SCOPE) == "ada@example.com"


def test_ref_paths_walk_dicts_and_list_indexes() -> None:
    assert resolve(ref("create", "profile.city"), SCOPE) == "Paris"
    assert resolve(ref("create", "items.1.sku"), SCOPE) == "y"
    assert resolve(ref("trigger", "tags.0"), SCOPE) == "a"


def test_ref_path_with_an_escaped_dot_reads_a_key_containing_a_dot() -> None:
    assert resolve(ref("trigger", "a\\.b"), SCOPE) == 7


def test_ref_to_state_and_item() -> None:
    assert resolve(ref("$state", "count"), SCOPE) == 3
    assert resolve(ref("$state", "cfg.mode"), SCOPE) == "fast"
    scope = Scope(item={"n": 5}, has_item=True, node="each")
    assert resolve(ref("$item", "n"), scope) == 5
    assert resolve(ref("$item"), Scope(item=None, has_item=True)) is None


def test_item_outside_a_for_each_node_is_an_error() -> None:
    with pytest.raises(GraphValueError, match=r"node 'n' uses \$item"):
        resolve(ref("$item"), SCOPE)


def test_missing_path_gives_none_or_the_default() -> None:
    assert resolve(ref("create", "nope.deeper"), SCOPE) is None
    assert resolve(ref("create", "items.9"), SCOPE) is None
    assert resolve(ref("create", "id.x"), SCOPE) is None  # into a number
    assert resolve(ref("create", "nope", default=0), SCOPE) == 0


def test_ref_to_a_node_that_did_not_run_names_both_nodes() -> None:
    with pytest.raises(GraphValueError) as info:
        resolve({"to": ref("gift", "id")}, Scope(nodes={}, node="welcome"))
    assert "'welcome'" in str(info.value) and "'gift'" in str(info.value)
    assert info.value.node == "welcome"
    assert info.value.missing == "gift"


def test_ref_to_a_node_that_did_not_run_with_a_default_gives_the_default() -> None:
    assert resolve(ref("gift", "id", default="none"), Scope(node="welcome")) == "none"


def test_nested_structures_resolve_recursively() -> None:
    value = {
        "user": {"id": ref("create", "id"), "name": ref("trigger", "name")},
        "list": [ref("flag"), 1, "x", None, {"deep": [ref("$state", "count")]}],
        "literal": {"$gt": 5},  # other $-keys are plain data
    }
    assert resolve(value, SCOPE) == {
        "user": {"id": 42, "name": "Ada"},
        "list": [True, 1, "x", None, {"deep": [3]}],
        "literal": {"$gt": 5},
    }


def test_resolve_copies_literals() -> None:
    definition = {"static": {"a": [1, 2]}}
    result = resolve(definition, SCOPE)
    result["static"]["a"].append(3)
    assert definition == {"static": {"a": [1, 2]}}


# -- $template ----------------------------------------------------------------------------


def test_template_interpolates_strings() -> None:
    value = {"$template": "Hi ${trigger.name}, you live in ${create.profile.city}"}
    assert resolve(value, SCOPE) == "Hi Ada, you live in Paris"


def test_template_inserts_non_strings_as_compact_json() -> None:
    assert resolve({"$template": "p=${create.profile}"}, SCOPE) == 'p={"city":"Paris"}'
    assert resolve({"$template": "tags=${trigger.tags}"}, SCOPE) == 'tags=["a","b"]'
    assert resolve({"$template": "${create.id}/${flag}"}, SCOPE) == "42/true"
    assert resolve({"$template": "x=${create.nope}"}, SCOPE) == "x=null"
    assert "[object Object]" not in resolve({"$template": "${create}"}, SCOPE)


def test_template_state_item_and_escapes() -> None:
    scope = Scope(state={"n": 2}, item="it", has_item=True)
    assert resolve({"$template": "${$state.n}-${$item}"}, scope) == "2-it"
    assert resolve({"$template": "$5 for ${trigger.name}, $${literal}"}, SCOPE) == (
        "$5 for Ada, ${literal}"
    )
    assert resolve({"$template": "${ trigger.name }"}, SCOPE) == "Ada"


def test_template_to_a_node_that_did_not_run_names_both_nodes() -> None:
    with pytest.raises(GraphValueError, match=r"node 'welcome' references node 'gift'"):
        resolve({"$template": "id ${gift.id}"}, Scope(node="welcome"))


def test_parse_template_parts() -> None:
    assert parse_template("a${x.y}b${z}") == ["a", ("x", "y"), "b", ("z",)]
    assert parse_template("no placeholders $x") == ["no placeholders $x"]


# -- paths ----------------------------------------------------------------------------


def test_parse_path_and_escapes() -> None:
    assert parse_path("a.b.0") == ("a", "b", "0")
    assert parse_path("") == ()
    assert parse_path("a\\.b.c") == ("a.b", "c")
    assert parse_path("back\\\\slash") == ("back\\slash",)
    assert parse_path(format_path(["x.y", "z\\", "w}"])) == ("x.y", "z\\", "w}")


@pytest.mark.parametrize("bad", ["a..b", ".a", "a.", "a\\", "a\\x"])
def test_parse_path_rejects_bad_syntax(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_path(bad)


def test_get_path_default() -> None:
    assert get_path({"a": [1]}, "a.0") == 1
    assert get_path({"a": [1]}, "a.5", default="d") == "d"


# -- references and syntax ----------------------------------------------------------------


def test_references_lists_node_ids_only_by_default() -> None:
    value = {
        "a": ref("create", "id"),
        "b": {"$template": "${trigger.x} ${welcome.y} ${$state.s}"},
        "c": [ref("$item"), ref("gift", default=None)],
    }
    assert references(value) == {"create", "welcome", "gift"}
    assert references(value, include_special=True) == {
        "create",
        "welcome",
        "gift",
        "trigger",
        "$item",
        "$state",
    }
    assert references(value, required_only=True) == {"create", "welcome"}


def test_check_syntax_reports_every_problem_with_its_location() -> None:
    value = {
        "ok": ref("trigger", "a.b"),
        "bad_path": ref("create", "a..b"),
        "bad_root": {"$ref": 5},
        "extra": {"$ref": "x", "paht": "y"},
        "list": [{"$template": "Hi ${trigger.name"}],
        "empty": {"$template": "${}"},
        "not_text": {"$template": 3},
    }
    problems = check_syntax(value, "node 'n' input")
    assert len(problems) == 6
    joined = "\n".join(problems)
    assert "node 'n' input.bad_path" in joined and "empty segment" in joined
    assert "node 'n' input.bad_root: $ref must be a non-empty string" in joined
    assert "unexpected key 'paht'" in joined
    assert "node 'n' input.list[0]" in joined and "unclosed" in joined
    assert "node 'n' input.empty" in joined
    assert "node 'n' input.not_text: $template must be a string" in joined
    assert check_syntax({"fine": [ref("trigger"), {"$template": "x"}, 1]}) == []


def test_resolve_reports_bad_syntax_as_value_error() -> None:
    with pytest.raises(GraphValueError, match="empty segment"):
        resolve(ref("trigger", "a..b"), SCOPE)
