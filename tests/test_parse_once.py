"""A process parses a composite file once (catenc/frontend/composites.py: load_composite_file
remembers it), and parses it again whenever the bytes of it or of any file it includes change."""

from __future__ import annotations

from pathlib import Path

from catenc.frontend import composites
from catenc.frontend.composites import all_composites, load_composite_file

MAIN = (
    'include = ["lib/inc.toml"]\n\n[composite.top]\ninputs = ["x: f32[N]"]\noutputs = ["y: f32[N]"]\nbody = "y = x"\n'
)
INC = '[composite.helper]\ninputs = ["a: f32[N]"]\noutputs = ["b: f32[N]"]\nbody = "b = a + {}"\n'


def counting(monkeypatch) -> list[str]:
    parsed: list[str] = []
    original = composites._composite_file

    def parse(source, path, *args, **kwargs):
        parsed.append(Path(path).name)
        return original(source, path, *args, **kwargs)

    monkeypatch.setattr(composites, "_composite_file", parse)
    return parsed


def test_a_file_and_its_includes_are_parsed_again_only_when_their_bytes_change(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "lib").mkdir()
    main, inc = tmp_path / "main.toml", tmp_path / "lib" / "inc.toml"
    main.write_text(MAIN)
    inc.write_text(INC.format(1))
    parsed = counting(monkeypatch)
    first = load_composite_file(str(main))
    assert parsed == ["main.toml", "inc.toml"]
    assert load_composite_file(str(main)) is first and len(parsed) == 2  # remembered
    inc.write_text(INC.format(2))  # an include changes: both are parsed again
    second = load_composite_file(str(main))
    assert parsed[2:] == ["main.toml", "inc.toml"]
    assert all_composites(second)["helper"].body == "b = a + 2"
    assert all_composites(first)["helper"].body == "b = a + 1"  # what was handed out never changes
    inc.unlink()  # a vanished include is the same error as before
    try:
        load_composite_file(str(main))
    except composites.CatencError as error:
        assert "cannot find included file 'lib/inc.toml'" in error.message
    else:
        raise AssertionError("a missing include was not reported")


def test_a_deep_include_chain_is_not_remembered_whole(tmp_path: Path, monkeypatch) -> None:
    """Past _LOADED_FILES files, checking every file on each lookup would cost the square of the
    chain's length; the top of such a chain is parsed each time, its remembered tail is not."""
    depth = composites._LOADED_FILES + 10
    for k in range(depth):
        include = f'include = ["c{k + 1}.toml"]\n' if k + 1 < depth else ""
        (tmp_path / f"c{k}.toml").write_text(include + INC.replace("helper", f"h{k}").format(k))
    parsed = counting(monkeypatch)
    load_composite_file(str(tmp_path / "c0.toml"))
    assert len(parsed) == depth
    parsed.clear()
    load_composite_file(str(tmp_path / "c0.toml"))
    assert parsed == [f"c{k}.toml" for k in range(depth - composites._LOADED_FILES)]
