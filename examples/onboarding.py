"""A graph workflow: onboarding a new user, defined as data instead of code.

``create`` makes the account, ``welcome`` sends the welcome mail and picks a branch
(``ctx.branch``), VIPs get a gift, and every tag the user signed up with is subscribed
in parallel (``for_each``). If the mail keeps failing, ``alert`` pages someone and the run
goes on along the handler instead of failing.

Draw it, or run it on an in-memory database::

    plait graph examples.onboarding:app onboard
    python examples/onboarding.py
"""

from __future__ import annotations

import asyncio

import plait
from plait.graph import to_mermaid

app = plait.App("onboarding")


@app.function
def create_user(data: dict, ctx: plait.StepContext) -> dict:
    # ctx.invocation_id is the same on every attempt: a real user store would use it to
    # make "create" idempotent
    user = {"id": f"u_{ctx.invocation_id[:8]}", "email": data["email"], "name": data["name"]}
    ctx.set_state("user_id", user["id"])
    return user


@app.function(retries=2, retry_delay="200ms")
async def send_email(mail: dict, ctx: plait.StepContext) -> dict:
    if "@" not in mail["to"]:
        raise ValueError(f"cannot deliver to {mail['to']!r}")
    ctx.branch("vip" if mail["vip"] else "regular")
    return {"to": mail["to"], "subject": mail["subject"]}


@app.function
async def send_gift(user: dict) -> dict:
    return {"gift": "mug", "for": user["id"]}


@app.function
async def subscribe(data: dict) -> str:
    return f"{data['user']} follows {data['tag']}"


@app.function
async def page_oncall(failure: dict) -> dict:
    # an on_error handler gets the failed node's error and the input it was given
    return {"paged": True, "reason": failure["error"]["message"], "to": failure["input"]["to"]}


ONBOARD = {
    "nodes": {
        "create": {
            "function": "create_user",
            "input": {
                "email": {"$ref": "trigger", "path": "email"},
                "name": {"$ref": "trigger", "path": "name"},
            },
            "next": ["welcome", "topics"],
        },
        "welcome": {
            "function": "send_email",
            "input": {
                "to": {"$ref": "create", "path": "email"},
                "subject": {"$template": "Welcome, ${trigger.name}!"},
                "vip": {"$ref": "trigger", "path": "vip", "default": False},
            },
            "next": {"vip": "gift", "regular": []},
            "on_error": "alert",
        },
        "gift": {"function": "send_gift", "input": {"$ref": "create"}},
        "topics": {
            "function": "subscribe",
            "for_each": {"$ref": "trigger", "path": "tags"},
            "input": {"user": {"$ref": "$state", "path": "user_id"}, "tag": {"$ref": "$item"}},
        },
        "alert": {"function": "page_oncall"},
    },
    "output": {
        "user": {"$ref": "create", "path": "id"},
        "welcome": {"$ref": "welcome", "default": None},
        "gift": {"$ref": "gift", "default": None},
        "topics": {"$ref": "topics"},
        "alert": {"$ref": "alert", "default": None},
    },
}

app.graph("onboard", ONBOARD)


async def main() -> None:
    async with plait.Engine(app, "sqlite:///:memory:") as engine:
        for person in (
            {"email": "ada@example.com", "name": "Ada", "vip": True, "tags": ["math", "news"]},
            {"email": "bob-at-nowhere", "name": "Bob", "tags": []},
        ):
            output = await engine.run("onboard", person, timeout=30)
            print(f"{person['name']}: {output}")
        print(to_mermaid(app.graphs["onboard"]))


if __name__ == "__main__":
    asyncio.run(main())
