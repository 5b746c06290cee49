"""Per-version plans: which fields a layout has at one version, in wire order, and how each is encoded.

A plan answers, once, every question the reader and writer would otherwise ask per record: is the
field present in this version, is it tagged, nullable, compact? Plans are cached per (layout, version),
so the generic reader and writer never test version numbers themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Union

from .layout import TYPE_DEFAULT, ArrayOf, Field, FieldType, Layout, Primitive, Struct, natural_default

Owner = Union[Layout, Struct]


@dataclass(frozen=True, eq=False)
class FieldPlan:
    """One field as it is encoded at one version."""

    field: Field
    name: str
    type: FieldType
    nullable: bool
    tagged: bool
    tag: int | None
    compact: bool
    struct_plan: "Plan | None"  # for a struct field or an array of structs
    default_factory: Callable[[], Any]
    default_mutable: bool
    min_size: int  # smallest possible encoding, used to bound array counts before allocating

    def default(self) -> Any:
        """A fresh copy of the value the field takes when it is absent."""
        return self.default_factory()


@dataclass(frozen=True, eq=False)
class Plan:
    """A struct (top-level or nested) at one version."""

    name: str
    version: int
    flexible: bool
    fields: tuple[FieldPlan, ...]  # present in this version, schema order
    untagged: tuple[FieldPlan, ...]  # wire order
    tagged: tuple[FieldPlan, ...]  # ascending tag
    by_name: dict[str, FieldPlan]
    all_names: frozenset[str]  # names the struct has in any version (for the writer's typo check)
    min_size: int

    def default_struct(self) -> dict[str, Any]:
        """The struct with every field at its default: Kafka's ``new X()`` for an empty struct default."""
        return {fp.name: fp.default_factory() for fp in self.fields}


_CACHE: dict[tuple[int, int, bool], tuple[Owner, Plan]] = {}


def plan_for(owner: Owner, version: int, flexible: bool | None = None) -> Plan:
    """The cached plan of a layout (or nested struct) at ``version``.

    For a `Layout`, ``version`` must be one of its valid versions and flexibility comes from its
    ``flexible`` range; a nested `Struct` inherits ``flexible`` from its parent.
    """
    if isinstance(owner, Layout):
        if version not in owner.valid:
            raise ValueError(f"{owner.name} has no version {version} (valid: {owner.valid})")
        flexible = version in owner.flexible
    elif flexible is None:
        raise ValueError("a nested struct needs the parent's flexibility")
    key = (id(owner), version, bool(flexible))
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is owner:
        return hit[1]
    plan = _build(owner, version, bool(flexible))
    _CACHE[key] = (owner, plan)
    return plan


def _build(owner: Owner, version: int, flexible: bool) -> Plan:
    fields = tuple(_field_plan(f, version, flexible) for f in owner.fields if version in f.versions)
    untagged = tuple(fp for fp in fields if not fp.tagged)
    tagged = tuple(sorted((fp for fp in fields if fp.tagged), key=lambda fp: fp.tag))
    min_size = sum(fp.min_size for fp in untagged) + (1 if flexible else 0)
    return Plan(
        name=owner.name,
        version=version,
        flexible=flexible,
        fields=fields,
        untagged=untagged,
        tagged=tagged,
        by_name={fp.name: fp for fp in fields},
        all_names=frozenset(f.name for f in owner.fields),
        min_size=min_size,
    )


def _field_plan(f: Field, version: int, flexible: bool) -> FieldPlan:
    t = f.type
    inner = t.element if isinstance(t, ArrayOf) else t
    struct_plan = plan_for(inner, version, flexible) if isinstance(inner, Struct) else None
    nullable = version in f.nullable
    tagged = version in f.tagged

    if f.default is None:
        factory, mutable = (lambda: None), False
    elif f.default is not TYPE_DEFAULT:
        value = f.default
        factory, mutable = (lambda: value), False
    elif isinstance(t, Struct):
        assert struct_plan is not None
        factory, mutable = struct_plan.default_struct, True
    elif isinstance(t, ArrayOf):
        factory, mutable = list, True
    else:
        value = natural_default(t)
        factory, mutable = (lambda: value), False

    return FieldPlan(
        field=f,
        name=f.name,
        type=t,
        nullable=nullable,
        tagged=tagged,
        tag=f.tag if tagged else None,
        compact=flexible,
        struct_plan=struct_plan,
        default_factory=factory,
        default_mutable=mutable,
        min_size=_min_size(t, nullable, flexible, struct_plan),
    )


def _min_size(t: FieldType, nullable: bool, compact: bool, struct_plan: Plan | None) -> int:
    if isinstance(t, Primitive):
        if t.size is not None:
            return t.size
        if compact:
            return 1
        return 2 if t.name == "string" else 4
    if isinstance(t, ArrayOf):
        return 1 if compact else 4
    assert struct_plan is not None
    return 1 if nullable else struct_plan.min_size


def element_min_size(fp: FieldPlan) -> int:
    """Smallest encoding of one element of an array field."""
    assert isinstance(fp.type, ArrayOf)
    el = fp.type.element
    if isinstance(el, Struct):
        assert fp.struct_plan is not None
        return fp.struct_plan.min_size
    return _min_size(el, False, fp.compact, None)
