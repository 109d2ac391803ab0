"""Generate the synthetic multi-session conversation with planted facts (fixed seed).

    uv run python benchmarks/context/recall/generate.py   # writes conversation.json

Ten sessions of forty user messages. Forty facts about the user are planted among
small talk: half said explicitly ("Please remember: my X is Y."), half in passing
("By the way, my X is Y."). Each has a question asked later ("What is my X?") and
the value that answers it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 20
THINGS = [
    "dentist",
    "locker number",
    "favourite tea",
    "bike colour",
    "gym day",
    "office floor",
    "cat's name",
    "sister's city",
    "car plate",
    "badge number",
    "desk plant",
    "train line",
    "lunch spot",
    "favourite author",
    "piano teacher",
    "running route",
    "coffee order",
    "garage code",
    "bank branch",
    "tailor",
    "landlord",
    "hiking club",
    "chess opening",
    "violin brand",
    "boat name",
    "home router",
    "allergy",
    "blood type",
    "shoe size",
    "wedding date",
    "project codename",
    "team lead",
    "standup time",
    "laptop model",
    "phone carrier",
    "streaming plan",
    "fishing spot",
    "tea shop",
    "pharmacy",
    "barber",
]
VALUES = [
    "Novak",
    "Amber",
    "Kestrel",
    "Juniper",
    "Orsolya",
    "Tamsin",
    "Quill",
    "Marlowe",
    "Caspian",
    "Odette",
    "Bramble",
    "Sorrel",
    "Lumen",
    "Thorne",
    "Wren",
    "Halcyon",
    "Ptolemy",
    "Isolde",
    "Corvin",
    "Saffron",
]
SMALL_TALK = [
    "How is the weather looking today?",
    "Can you suggest a good book?",
    "What time is it in Tokyo right now?",
    "Tell me a fun fact about octopuses.",
    "I had a long day at work.",
    "Any tips for staying focused?",
    "What should I cook tonight?",
    "Remind me what we talked about earlier.",
    "Is it a good idea to learn Rust?",
    "I am thinking about a trip to Lisbon.",
]


def main() -> None:
    rng = random.Random(SEED)
    planted = []
    for n, thing in enumerate(THINGS):
        value = f"{rng.choice(VALUES)}-{rng.randint(10, 999)}"
        planted.append(
            {
                "id": n,
                "thing": thing,
                "value": value,
                "explicit": n % 2 == 0,
                "question": f"What is my {thing}?",
            }
        )
    sessions: list[list[str]] = [[] for _ in range(10)]
    slots = [(s, t) for s in range(10) for t in range(40)]
    chosen = rng.sample(slots, len(planted))
    at = dict(zip(chosen, planted, strict=True))
    for s in range(10):
        for t in range(40):
            fact = at.get((s, t))
            if fact is None:
                sessions[s].append(rng.choice(SMALL_TALK))
            elif fact["explicit"]:
                sessions[s].append(f"Please remember: my {fact['thing']} is {fact['value']}.")
            else:
                sessions[s].append(
                    f"{rng.choice(SMALL_TALK)} By the way, my {fact['thing']} is {fact['value']}."
                )
    out = Path(__file__).with_name("conversation.json")
    out.write_text(json.dumps({"seed": SEED, "sessions": sessions, "planted": planted}, indent=1))
    print(f"wrote {out} ({len(planted)} planted facts in {len(sessions)} sessions)")


if __name__ == "__main__":
    main()
