"""Real Python values through steps, workflows and events: encoded to JSON with pydantic
and decoded as the type the function's annotation names, on the first run and on every
replay alike."""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import json
import typing
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pydantic
import pytest
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

import plait
from plait import serde


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Parcel:
    weight: Decimal
    sent: datetime
    tags: tuple[str, ...]


class Receipt(pydantic.BaseModel):
    id: uuid.UUID
    amount: Decimal
    at: datetime
    color: Color = Color.RED


class Order(pydantic.BaseModel):
    id: int
    amount: Decimal


WHEN = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
ID = uuid.UUID("0190f0c4-3b2a-7c00-8a00-000000000001")


async def _datetime(data: None) -> datetime:
    return WHEN


async def _date(data: None) -> date:
    return WHEN.date()


def _decimal(data: None) -> Decimal:
    return Decimal("10.10")


async def _uuid(data: None) -> uuid.UUID:
    return ID


async def _enum(data: None) -> Color:
    return Color.BLUE


async def _set(data: None) -> set[int]:
    return {3, 1, 2}


async def _frozenset(data: None) -> frozenset[str]:
    return frozenset({"a", "b"})


async def _tuple(data: None) -> tuple[int, str, datetime]:
    return (1, "x", WHEN)


async def _dataclass(data: None) -> Parcel:
    return Parcel(Decimal("1.5"), WHEN, ("fragile",))


async def _model(data: None) -> Receipt:
    return Receipt(id=ID, amount=Decimal("42.00"), at=WHEN)


async def _nested(data: None) -> dict[str, list[Receipt]]:
    return {"all": [Receipt(id=ID, amount=Decimal("1"), at=WHEN, color=Color.BLUE)]}


async def _optional(data: None) -> datetime | None:
    return None


class Tally(TypedDict):
    name: str
    by_size: dict[int, str]


async def _int_keys(data: None) -> dict[int, str]:
    return {1: "a", 2: "b"}


async def _nested_int_keys(data: None) -> dict[str, dict[int, float]]:
    return {"x": {3: 0.5, -4: 2.25}, "y": {}}


async def _listed_int_keys(data: None) -> list[dict[int, str]]:
    return [{1: "a"}, {}, {10: "j", 20: "t"}]


async def _typed_dict(data: None) -> Tally:
    return {"name": "shoes", "by_size": {42: "few", 43: "none"}}


BODIES = [
    _datetime,
    _date,
    _decimal,
    _uuid,
    _enum,
    _set,
    _frozenset,
    _tuple,
    _dataclass,
    _model,
    _nested,
    _optional,
    _int_keys,
    _nested_int_keys,
    _listed_int_keys,
    _typed_dict,
]


async def _expected(body: Any) -> Any:
    """What the body returns, as the workflow must see it (its own return value)."""
    result = body(None)
    return await result if inspect.iscoroutine(result) else result


class IntFlagLike(enum.IntEnum):
    """An int subclass: written by the encoder, as its JSON form, not by ``str``."""

    A = 3


@pytest.mark.parametrize("body", BODIES, ids=lambda b: b.__name__.strip("_"))
@pytest.mark.parametrize("queued", [False, True], ids=["inline", "queued"])
async def test_a_step_result_comes_back_as_its_annotated_type(
    engine_factory, body: Any, queued: bool
) -> None:
    """The first run and a replay after a suspend see the same value, of the type the
    function's return annotation names; the body ran once."""
    app = plait.App()
    seen: list[Any] = []
    calls: list[int] = []

    async def counted(data: None) -> Any:
        calls.append(1)
        result = body(data)
        return await result if hasattr(result, "__await__") else result

    counted.__annotations__["return"] = body.__annotations__["return"]
    app.function(name="make", queued=queued)(counted)

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> str:
        value = await wf.do("make", "make")
        seen.append(value)
        await wf.suspend("look")
        return type(value).__name__

    expected = await _expected(body)
    async with engine_factory(app) as engine:
        run_id = await engine.start("w")
        assert (await engine.wait(run_id, timeout=10)).status == "suspended"
        await engine.resume(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed", run.error
    assert len(calls) == 1
    assert len(seen) == 2
    first, replayed = seen
    assert first == expected and replayed == expected
    assert type(first) is type(expected) and type(replayed) is type(expected)
    if isinstance(expected, tuple):
        assert [type(v) for v in first] == [type(v) for v in expected]


@pytest.mark.parametrize(
    "annotation",
    [
        dict,
        typing.Dict,  # noqa: UP006
        dict[str, int],
        dict[str, Any],
        dict[Any, str],
        dict[object, str],
        dict[str, dict[str, list[int]]],
        list[dict[str, int]],
        dict[str, int] | None,
        typing.Optional[dict[str, bool]],  # noqa: UP045
        typing.Mapping[str, int],
        collections.abc.Mapping[str, list[str]],
        collections.abc.MutableMapping[str, float],
        list,
        Any,
        str | None,
    ],
)
def test_text_keyed_json_is_plain(annotation: Any) -> None:
    """JSON gives these back as they are: no pydantic, no cost."""
    assert serde.is_plain(annotation)
    assert serde.codec_for(annotation, "test") is None


@pytest.mark.parametrize(
    "annotation",
    [
        dict[int, str],
        typing.Dict[int, str],  # noqa: UP006
        dict[str, dict[int, float]],
        list[dict[int, str]],
        dict[int, str] | None,
        dict[str, list[dict[float, str]]],
        collections.abc.Mapping[int, str],
        dict[bool, str],
        dict[uuid.UUID, str],
        dict[Color, int],
        dict[str | int, int],
        dict[str, Receipt],
        Tally,
    ],
)
def test_keys_json_cannot_give_back_are_not_plain(annotation: Any) -> None:
    """A JSON object's keys are always text: an annotation whose keys are something else
    (at any depth) is decoded by pydantic, which turns them back into what it names."""
    assert not serde.is_plain(annotation)
    assert serde.codec_for(annotation, "test") is not None


async def test_only_keys_json_cannot_give_back_cost_pydantic(
    engine_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through ``wf.do``: ``dict[int, str]`` is decoded by pydantic into int keys, while
    ``dict[str, int]`` is given back by ``json`` alone."""
    decoded: list[Any] = []
    decode = serde.Codec.decode

    def spy(codec: serde.Codec, text: str | bytes | None, what: str) -> Any:
        decoded.append(codec.annotation)
        return decode(codec, text, what)

    monkeypatch.setattr(serde.Codec, "decode", spy)
    app = plait.App()

    @app.function
    def by_name(data: None) -> dict[str, int]:
        return {"a": 1}

    @app.function
    def by_number(data: None) -> dict[int, str]:
        return {1: "a"}

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> list[Any]:
        return [await wf.do("name", by_name), await wf.do("number", by_number)]

    async with engine_factory(app) as engine:
        # the workflow has no output annotation: its output is JSON, keys and all
        assert await engine.run("w", timeout=10) == [{"a": 1}, {"1": "a"}]
    assert dict[int, str] in decoded
    assert dict[str, int] not in decoded


async def test_a_pydantic_model_comes_back_as_the_model_on_replay(engine_factory) -> None:
    """A closure's annotation counts too, and the model stays a model after a crash-free
    replay (a suspend and resume)."""
    app = plait.App()
    seen: list[Any] = []

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> dict:
        async def make() -> Receipt:
            return Receipt(id=ID, amount=Decimal("9.99"), at=WHEN)

        receipt = await wf.do("make", make)
        seen.append(receipt)
        await wf.suspend("look")
        return {"amount": receipt.amount, "at": receipt.at}

    async with engine_factory(app) as engine:
        run_id = await engine.start("w")
        await engine.wait(run_id, timeout=10)
        await engine.resume(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed", run.error
        # without an annotation on the workflow, the output is its JSON form
        assert run.output == {"amount": "9.99", "at": "2030-01-02T03:04:05.678000Z"}
        (step,) = [s for s in await engine.get_steps(run_id) if s.key == "make"]
        assert step.output["amount"] == "9.99"
    assert all(isinstance(r, Receipt) for r in seen) and seen[0] == seen[1]


async def test_without_an_annotation_a_step_gives_json(engine_factory) -> None:
    """No annotation (or ``Any``, ``dict``): the value is what JSON gives back, the same
    on the first run and on replay."""
    app = plait.App()
    seen: list[Any] = []

    @app.function
    async def stamp(data):  # type: ignore[no-untyped-def]
        return {"at": WHEN, "ids": {1}}

    @app.function
    async def loose(data: Any) -> Any:
        return WHEN

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> None:
        seen.append(await wf.do("stamp", stamp))
        seen.append(await wf.do("loose", loose))
        seen.append(await wf.do("lambda", lambda: ID))

    async with engine_factory(app) as engine:
        await engine.run("w", timeout=10)
    assert seen == [
        {"at": "2030-01-02T03:04:05.678000Z", "ids": [1]},
        "2030-01-02T03:04:05.678000Z",
        str(ID),
    ]


async def test_what_pydantic_cannot_encode_fails_the_step_naming_it(engine_factory) -> None:
    app = plait.App()
    calls: list[str] = []

    class Opaque:
        pass

    @app.function(retries=3)
    async def opaque(data: None) -> Any:
        calls.append("opaque")
        return {"thing": Opaque()}

    @app.function(retries=3)
    async def raw(data: None) -> bytes:
        calls.append("raw")
        return b"\xff\xfe"

    @app.workflow
    async def w(wf: plait.Workflow, data: str) -> None:
        await wf.do(data, data)

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError) as info:
            await engine.run("w", "opaque", timeout=10)
        message = info.value.run.error["message"]
        assert "the result of step 'opaque'" in message and "Opaque" in message
        assert info.value.run.error["code"] == "NOT_JSON"
        with pytest.raises(plait.WorkflowFailedError) as info:
            await engine.run("w", "raw", timeout=10)
        assert "the result of step 'raw'" in info.value.run.error["message"]
        assert "bytes" in info.value.run.error["message"]
    assert calls == ["opaque", "raw"]  # not retried: the same body gives the same value


async def test_a_result_that_breaks_its_annotation_fails_the_step(engine_factory) -> None:
    """Checked before the result is stored, so no replay can meet a value that does not
    decode. (A plain JSON annotation such as ``int`` or ``dict`` is not checked: JSON
    gives such values back as they are, and checking them would tax every step.)"""
    app = plait.App()
    calls: list[int] = []

    @app.function(retries=2)
    async def count(data: None) -> date:
        calls.append(1)
        return "many"  # type: ignore[return-value]

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> None:
        await wf.do("count", count)

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError) as info:
            await engine.run("w", timeout=10)
        error = info.value.run.error
        assert error["code"] == "TYPE_MISMATCH" and error["step"] == "count"
        assert "result of step 'count'" in error["message"] and "date" in error["message"]
        (step,) = await engine.get_steps(info.value.run.id)
        assert step.status == "failed" and step.output is None
    assert calls == [1]


async def test_annotated_workflow_input_and_output(engine_factory) -> None:
    """A workflow's data parameter and return annotation decode its input and output:
    ``engine.run`` returns the model, ``wf.input`` is the model too; bad input is refused
    at ``start``, naming the workflow."""
    app = plait.App()
    inputs: list[Any] = []

    @app.workflow
    async def pay(wf: plait.Workflow, order: Order) -> Receipt:
        inputs.append((order, wf.input))
        return Receipt(id=ID, amount=order.amount, at=WHEN)

    @app.workflow
    async def parent(wf: plait.Workflow, data: None) -> list[Any]:
        receipt = await wf.do("pay", "pay", {"id": 1, "amount": "3.50"})
        return [type(receipt).__name__, receipt.amount]

    async with engine_factory(app) as engine:
        receipt = await engine.run("pay", {"id": "7", "amount": "12.5"}, timeout=10)
        assert isinstance(receipt, Receipt) and receipt.amount == Decimal("12.5")
        assert await engine.run("pay", Order(id=8, amount=Decimal(1)), timeout=10) == Receipt(
            id=ID, amount=Decimal(1), at=WHEN
        )
        assert all(isinstance(o, Order) and w is o for o, w in inputs)
        with pytest.raises(plait.InputValidationError, match="input of workflow 'pay'") as info:
            await engine.start("pay", {"id": "seven"})
        assert "id" in str(info.value)
        assert await engine.run("parent", timeout=10) == ["Receipt", "3.50"]


async def test_a_workflow_output_that_breaks_its_annotation_fails_the_run(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> datetime:
        return "not a time"  # type: ignore[return-value]

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError) as info:
            await engine.run("w", timeout=10)
        assert info.value.run.error["code"] == "TYPE_MISMATCH"
        assert "output of workflow 'w'" in info.value.run.error["message"]


async def test_events_and_values_encode_models_and_dataclasses(engine_factory) -> None:
    """Events carry no annotation: a model or dataclass payload is sent as its JSON
    form and received as JSON; published values likewise."""
    app = plait.App()

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> Any:
        await wf.set_value("when", WHEN)
        return await wf.wait_for_event("parcel")

    async with engine_factory(app) as engine:
        run_id = await engine.start("w")
        await engine.send_event(run_id, "parcel", Parcel(Decimal("2"), WHEN, ("a",)))
        run = await engine.wait(run_id, timeout=10)
        assert run.output == {
            "weight": "2",
            "sent": "2030-01-02T03:04:05.678000Z",
            "tags": ["a"],
        }
        assert await engine.get_value(run_id, "when") == "2030-01-02T03:04:05.678000Z"
        other = await engine.start("w")
        await engine.send_event(other, "parcel", Order(id=1, amount=Decimal("1.0")))
        assert (await engine.wait(other, timeout=10)).output == {"id": 1, "amount": "1.0"}


def test_a_schedule_input_is_stored_as_its_json_form() -> None:
    app = plait.App()
    spec = app.schedule("tick", workflow="w", every="1h", input={"at": WHEN, "id": ID})
    assert spec.input == {"at": "2030-01-02T03:04:05.678000Z", "id": str(ID)}
    with pytest.raises(plait.NotJSONError, match="input of schedule 'tock'"):
        app.schedule("tock", workflow="w", every="1h", input={"x": object()})


def test_a_set_is_stored_in_one_order_whatever_the_hash_seed() -> None:
    """A step's input is compared with the recorded one on replay, and a replay may run
    in another process, where strings hash (and sets iterate) differently."""
    import subprocess
    import sys

    script = (
        "from plait import serde; "
        "print(serde.dumps({'tags': {'apple', 'pear', 'fig', 'kiwi', 'plum', 'lime'}}))"
    )
    texts = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**__import__("os").environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(6)
    }
    assert len(texts) == 1, texts
    assert serde.dumps({1, "a", (2, 3)}) == serde.dumps({(2, 3), "a", 1})


@pytest.mark.parametrize(
    "value",
    [0, -1, 7, 10**17, -(10**17), 10**18, 10**30, -(10**30), True, False, 1.5, IntFlagLike.A],
)
def test_ints_are_written_as_json_writes_them(value: Any) -> None:
    """Plain ints skip the encoder; everything else (bools, subclasses, huge ints) still
    goes through it, and reads back the same."""
    text = serde.dumps(value)
    assert text == json.dumps(value, separators=(",", ":"))
    assert serde.loads(text) == value


def test_an_int_result_is_still_held_to_the_payload_limit() -> None:
    with pytest.raises(plait.PayloadTooLargeError):
        serde.dumps(123456, what="the result of step 's'", limits=serde.Limits(max_payload=3))
    assert serde.dumps(123, limits=serde.Limits(max_payload=3)) == "123"


@pytest.mark.parametrize(
    "text",
    ['{"a":[1,2.5,null,true],"b":"\\u00e9"}', "3", " 3", "3 ", "\n[1]\n", '"x"', "-1e400", b"[1]"],
)
def test_stored_json_reads_back_as_json_reads_it(text: str | bytes) -> None:
    assert serde.loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ["", "3x", "{", "[1]]", " ", '"open', "tru"])
def test_text_that_is_not_json_is_refused_as_json_refuses_it(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as ours:
        serde.loads(text)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(text)
    assert str(ours.value) == str(theirs.value)
