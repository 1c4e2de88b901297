"""The compiled C templates kept in codegen/__pycache__ (catenc/codegen/jinja.py): reused by the
next process, checked against the template's source, harmless when damaged, never written where
Python writes no bytecode."""

from __future__ import annotations

import sys

import pytest

from catenc.codegen import jinja


def compiled(environment) -> dict[str, object]:
    """Template name -> the code object of its render function."""
    names = [n for n in environment.list_templates() if n.endswith(".j2")]
    return {name: environment.get_template(name).root_render_func.__code__ for name in names}


@pytest.mark.parametrize("lstrip", [False, True])
def test_templates_compile_once_and_load_as_compiled(tmp_path, monkeypatch, lstrip):
    monkeypatch.setattr(jinja, "CACHE_DIRECTORY", tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    first = compiled(jinja.environment(lstrip))
    variant = "lstrip" if lstrip else "plain"
    files = sorted(tmp_path.iterdir())
    assert len(files) == len(first) and all(f.name.endswith(f".{variant}.cache") for f in files)

    loads = []
    original = jinja._TemplateBytecode.load_bytecode

    def counting(self, bucket):
        original(self, bucket)
        loads.append(bucket.code is not None)

    monkeypatch.setattr(jinja._TemplateBytecode, "load_bytecode", counting)
    assert compiled(jinja.environment(lstrip)) == first
    assert loads == [True] * len(first)  # every template came from its file

    whole = {f: f.read_bytes() for f in files}
    for damage in (lambda data: b"\x00garbage" * 7, lambda data: data[: len(data) // 2]):
        for f in files:  # damaged files (a wrong header, cut short): compiled again, the same code
            f.write_bytes(damage(whole[f]))
        loads.clear()
        assert compiled(jinja.environment(lstrip)) == first
        assert loads == [False] * len(first)


def test_no_file_is_written_where_python_writes_no_bytecode(tmp_path, monkeypatch):
    monkeypatch.setattr(jinja, "CACHE_DIRECTORY", tmp_path / "cache")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert compiled(jinja.environment())
    assert not any((tmp_path / "cache").iterdir())


def test_an_unwritable_cache_directory_is_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(jinja, "CACHE_DIRECTORY", blocker / "cache")
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert compiled(jinja.environment()) == compiled(jinja.environment())
