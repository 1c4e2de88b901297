"""The options of `catenc compile` as one object, each declaring its part in the compile cache's
key (docs/cli.md, "Compile cache"). It imports nothing of the compiler: a cache hit is decided
from these options alone."""

from __future__ import annotations

import enum
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

ROLE = "catenc.cache_role"  # the field metadata that holds a CacheRole


class CacheRole(enum.Enum):
    """What an option is to the compile cache."""

    KEYED = "keyed"  # it can change what compile writes: its value enters the key
    KEYED_FILE = "keyed file"  # it names a file read before planning: its value and the file's bytes are keyed
    UNKEYED = "unkeyed"  # it never changes what compile writes (where it goes, what is printed, the depfile)
    UNCACHED = "uncached"  # set, it watches or opts out of the cache: the compile runs, uncached


def option(role: CacheRole, default: Any = MISSING) -> Any:
    """A field of an options class, with its cache role."""
    return field(default=default, metadata={ROLE: role})


def cache_roles(cls: type) -> type:
    """`cls` as a frozen dataclass whose every field declares a CacheRole (TypeError otherwise,
    when the class is made), so that no option is added without saying whether it is keyed."""
    cls = dataclass(frozen=True)(cls)
    undeclared = [f.name for f in fields(cls) if not isinstance(f.metadata.get(ROLE), CacheRole)]
    if undeclared:
        raise TypeError(f"{cls.__name__}: no cache role declared for {', '.join(undeclared)} (use options.option)")
    return cls


def with_role(options: object, *roles: CacheRole) -> dict[str, Any]:
    """The fields of `options` with one of these roles, name -> value, in declaration order."""
    return {f.name: getattr(options, f.name) for f in fields(options) if f.metadata[ROLE] in roles}


@cache_roles
class CompileOptions:
    """`catenc compile`'s command line as given (the defaults are the command's)."""

    file: str = option(CacheRole.KEYED_FILE)
    out_dir: str = option(CacheRole.UNKEYED, ".")
    runtime_spec: str = option(CacheRole.KEYED, "clang")  # its descriptor's bytes are keyed too
    defines: tuple[str, ...] = option(CacheRole.KEYED, ())
    include_dirs: tuple[str, ...] = option(CacheRole.KEYED, ())
    config_items: tuple[str, ...] = option(CacheRole.KEYED, ())
    opt: str = option(CacheRole.KEYED, "2")
    composites: tuple[str, ...] = option(CacheRole.KEYED, ())
    prefix: str = option(CacheRole.KEYED, "")
    weights: str = option(CacheRole.KEYED, "baked")
    sources_only: bool = option(CacheRole.KEYED, False)
    object_only: bool = option(CacheRole.KEYED, False)
    emit_text: str | None = option(CacheRole.KEYED, None)
    test_sizes: str | None = option(CacheRole.UNKEYED, None)  # the test runs on a hit too
    debug_level: int = option(CacheRole.UNCACHED, 0)
    print_passes: bool = option(CacheRole.UNCACHED, False)
    dump_after: tuple[str, ...] = option(CacheRole.KEYED, ())
    disabled_passes: tuple[str, ...] = option(CacheRole.KEYED, ())
    time_passes: bool = option(CacheRole.UNCACHED, False)
    verify_ir: bool = option(CacheRole.UNCACHED, False)
    tuning_path: str | None = option(CacheRole.KEYED_FILE, None)
    make_deps: bool = option(CacheRole.UNKEYED, False)
    depfile: str | None = option(CacheRole.UNKEYED, None)
    dep_target: str | None = option(CacheRole.UNKEYED, None)
    dep_phony: bool = option(CacheRole.UNKEYED, False)
    verbose: bool = option(CacheRole.UNKEYED, False)
    quiet: bool = option(CacheRole.UNKEYED, False)
    no_cache: bool = option(CacheRole.UNCACHED, False)

    def cache_key(self) -> dict[str, Any]:
        """The options that enter the compile cache's key, as given."""
        return with_role(self, CacheRole.KEYED, CacheRole.KEYED_FILE)

    def keyed_files(self) -> list[str]:
        """The files named by options whose bytes are keyed."""
        return [str(value) for value in with_role(self, CacheRole.KEYED_FILE).values() if value]

    def uncached(self) -> bool:
        """True when an option asks to watch the compile or not to use the cache."""
        return any(with_role(self, CacheRole.UNCACHED).values())
