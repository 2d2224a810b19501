#!/usr/bin/env python3
"""The demo chat dataset: assets/demo/chat.jsonl (data.format chat).

About 200 short synthetic conversations with one right answer each, so that a tiny model can
learn to answer them: capitals ("What is the capital of France?" / "The capital of France is
Paris."), sums and products of small numbers ("What is 3 + 4?" / "3 + 4 = 7."), and a few
two-turn conversations and ones with their own system prompt. Deterministic (seeded); the
content is generated here and is public domain.

Made with:  python3 tools/make_demo_chat.py > assets/demo/chat.jsonl
"""
import json
import random
import sys

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("Japan", "Tokyo"), ("China", "Beijing"), ("India", "New Delhi"),
    ("Canada", "Ottawa"), ("Mexico", "Mexico City"), ("Brazil", "Brasilia"),
    ("Argentina", "Buenos Aires"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Peru", "Lima"),
    ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Poland", "Warsaw"),
    ("Greece", "Athens"), ("Ireland", "Dublin"), ("Austria", "Vienna"), ("Hungary", "Budapest"),
    ("Chile", "Santiago"), ("Cuba", "Havana"), ("Turkey", "Ankara"), ("Iran", "Tehran"),
    ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("Australia", "Canberra"),
]
SYSTEMS = ["You are a concise assistant.", "Answer in one sentence."]


def capital_turn(rng):
    country, city = rng.choice(CAPITALS)
    return (f"What is the capital of {country}?", f"The capital of {country} is {city}.")


def arithmetic_turn(rng):
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    if rng.random() < 0.6:
        return (f"What is {a} + {b}?", f"{a} + {b} = {a + b}.")
    return (f"What is {a} times {b}?", f"{a} times {b} is {a * b}.")


def conversation(rng):
    messages = []
    if rng.random() < 0.2:
        messages.append({"role": "system", "content": rng.choice(SYSTEMS)})
    for _ in range(2 if rng.random() < 0.15 else 1):
        question, answer = (capital_turn if rng.random() < 0.5 else arithmetic_turn)(rng)
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": answer})
    return {"messages": messages}


def main():
    rng = random.Random(0)
    for _ in range(200):
        sys.stdout.write(json.dumps(conversation(rng)) + "\n")


if __name__ == "__main__":
    main()
