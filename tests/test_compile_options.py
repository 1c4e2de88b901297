"""`catenc compile`'s options as one object (catenc/options.py): every field declares its part
in the compile cache's key, the key follows the declarations, and the object is the command's."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

from catenc import cache, cli
from catenc.options import ROLE, CacheRole, CompileOptions, cache_roles, option
from catenc.resources import bundled_runtime_names

# A value other than the default for every option (a test of a new option must add one).
OTHER = {
    "file": "other.toml",
    "out_dir": "elsewhere",
    "runtime_spec": "opencl",
    "defines": ("N=3",),
    "include_dirs": ("lib",),
    "config_items": ("OMP=0",),
    "opt": "3",
    "composites": ("model",),
    "prefix": "p_",
    "weights": "external",
    "sources_only": True,
    "object_only": True,
    "emit_text": "c,h",
    "test_sizes": "N=3",
    "debug_level": 1,
    "print_passes": True,
    "dump_after": ("all",),
    "disabled_passes": ("fuse-rows",),
    "time_passes": True,
    "verify_ir": True,
    "tuning_path": "model.tuning.json",
    "make_deps": True,
    "depfile": "x.d",
    "dep_target": "target",
    "dep_phony": True,
    "verbose": True,
    "quiet": True,
    "no_cache": True,
}
EMIT = ("c", "h", "manifest", "so")


def roles() -> dict[str, CacheRole]:
    return {f.name: f.metadata[ROLE] for f in fields(CompileOptions)}


@pytest.fixture
def key_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The compile cache's key of some options, in a directory holding the files they name;
    None where the options keep the cache out."""
    for name in ("model.toml", "other.toml"):
        (tmp_path / name).write_text(
            '[composite.model]\ninputs = ["x: f32[N]"]\noutputs = ["y: f32[N]"]\nbody = "y = x"\n'
        )
    (tmp_path / "model.tuning.json").write_text('{"format": "catenc.tuning/1", "entries": []}')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CATENC_NO_CACHE", raising=False)
    monkeypatch.delenv("CATENC_VERIFY_IR", raising=False)
    monkeypatch.setenv("CATENC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "source_hash", lambda: "catenc as it is")  # others edit it meanwhile

    def key_of(options: CompileOptions) -> str | None:
        slot = cli._cache_slot(options, EMIT)
        return slot.key if slot else None

    return key_of


def test_a_field_without_a_cache_role_is_an_error_when_the_class_is_made():
    with pytest.raises(TypeError, match="Late: no cache role declared for forgotten"):

        @cache_roles
        class Late:
            kept: int = option(CacheRole.KEYED, 0)
            forgotten: int = 0

    @cache_roles
    class Declared:
        kept: int = option(CacheRole.KEYED, 0)

    assert Declared().kept == 0


def test_the_fields_are_the_commands_options_with_its_defaults():
    given = cli.main.commands["compile"].make_context("compile", ["model.toml"]).params
    assert list(given) == [f.name for f in fields(CompileOptions)] == list(OTHER)
    assert CompileOptions(**given) == CompileOptions(file="model.toml")


def test_every_keyed_option_changes_the_key_and_no_other_does(key_of):
    base = CompileOptions(file="model.toml")
    assert "opencl" in bundled_runtime_names()
    first = key_of(base)
    assert first is not None and key_of(base) == first
    keys = {}
    for name, role in roles().items():
        key = key_of(replace(base, **{name: OTHER[name]}))
        if role in (CacheRole.KEYED, CacheRole.KEYED_FILE):
            assert key is not None and key != first, name
            keys[name] = key
        elif role is CacheRole.UNKEYED:
            assert key == first, name
        else:
            assert key is None, name
    assert len(set(keys.values())) == len(keys)  # each keyed option moves the key its own way
    assert set(keys) == {
        "file", "runtime_spec", "defines", "include_dirs", "config_items", "opt", "composites", "prefix", "weights",
        "sources_only", "object_only", "emit_text", "dump_after", "disabled_passes", "tuning_path",
    }  # fmt: skip


def test_the_bytes_of_keyed_files_are_keyed(key_of, tmp_path: Path):
    options = CompileOptions(file="model.toml", tuning_path="model.tuning.json")
    first = key_of(options)
    (tmp_path / "model.tuning.json").write_text('{"format": "catenc.tuning/1", "entries": [] }')
    second = key_of(options)
    assert second != first
    (tmp_path / "model.toml").write_text((tmp_path / "model.toml").read_text() + "# an edit\n")
    assert key_of(options) not in (first, second)
