"""A plugin's option defaults live once, in its ``options_schema``; ``with_defaults`` fills them."""

from __future__ import annotations

from kvbench_core.contracts.validation import with_defaults

SCHEMA = {
    "type": "object",
    "properties": {
        "timeout": {"type": "string", "default": "5s"},
        "keys": {"type": "array", "default": ["a_", "b_"]},
        "nested": {"type": "object", "properties": {"depth": {"type": "integer", "default": 2}}},
        "url": {"type": "string"},
    },
}


def test_absent_keys_get_the_schema_default_and_given_keys_win():
    options = {"timeout": "1s", "url": "redis://x"}
    filled = with_defaults(SCHEMA, options)
    assert filled == {"timeout": "1s", "url": "redis://x", "keys": ["a_", "b_"]}
    assert options == {"timeout": "1s", "url": "redis://x"}  # the caller's dict is left alone


def test_a_given_none_is_kept_not_replaced_by_the_default():
    assert with_defaults(SCHEMA, {"timeout": None})["timeout"] is None


def test_mutable_defaults_are_never_shared():
    first, second = with_defaults(SCHEMA, {}), with_defaults(SCHEMA, {})
    first["keys"].append("c_")
    assert second["keys"] == ["a_", "b_"]
    assert SCHEMA["properties"]["keys"]["default"] == ["a_", "b_"]


def test_a_nested_object_given_gets_its_defaults_but_an_absent_one_is_not_created():
    """A partial section keeps its other defaults; a section the user left out is not conjured up by its
    inner defaults unless the section itself declares a default."""
    assert "nested" not in with_defaults(SCHEMA, {})
    given = {"nested": {}}
    assert with_defaults(SCHEMA, given)["nested"] == {"depth": 2}
    assert given == {"nested": {}}  # the inner dict is copied, not filled in place
    assert with_defaults(SCHEMA, {"nested": {"depth": 5}})["nested"] == {"depth": 5}
    section = {"properties": {"nested": {**SCHEMA["properties"]["nested"], "default": {}}}}
    assert with_defaults(section, {}) == {"nested": {"depth": 2}}


def test_one_of_branches_are_not_followed():
    schema = {"properties": {"qos": {"oneOf": [{"type": "string"}, {"type": "object", "properties": {
        "batch": {"type": "number", "default": 1.0}}}]}}}
    assert with_defaults(schema, {"qos": {}}) == {"qos": {}}


def test_a_schema_without_properties_returns_a_copy():
    options = {"x": 1}
    filled = with_defaults({"type": "object"}, options)
    assert filled == options and filled is not options
