#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Grade-school word problems for the SmolLM2 study, generated from a seed.

Each problem starts with a quantity and applies two to four operations to it (buy more, give away,
boxes of n, share equally), every intermediate value a whole number between 1 and 999, and states the
answer. The prompt asks for step-by-step work and a final "Answer: N" line.

    python3 scripts/make-word-problems.py --seed 51 --count 200 > experiments/data/word-problems-200.jsonl

Uses only the standard library, so the committed file can be regenerated (and is checked to be) on
any machine with Python 3.
"""
import argparse
import json
import random

NAMES = [("Maria", "she"), ("Tom", "he"), ("Aisha", "she"), ("Ben", "he"), ("Lena", "she"),
         ("Omar", "he"), ("Sofia", "she"), ("Jack", "he"), ("Mei", "she"), ("Lucas", "he")]
FRIENDS = ["a friend", "a neighbour", "the teacher", "a classmate", "a cousin"]
THINGS = ["apples", "stickers", "marbles", "pencils", "cookies", "stamps", "books", "shells"]
INSTRUCTION = ('Solve the problem step by step. Finish with a line of the form "Answer: N", '
               "where N is the final number.")


def buy(rng, total, who, pronoun, thing):
    n = rng.randint(2, 40)
    return total + n, f"{who} buys {n} more {thing}."


def give(rng, total, who, pronoun, thing):
    if total < 3:
        return None
    n = rng.randint(1, total - 1)
    return total - n, f"{who} gives {n} {thing} to {rng.choice(FRIENDS)}."


def boxes(rng, total, who, pronoun, thing):
    k, m = rng.randint(2, 6), rng.randint(2, 12)
    return total + k * m, f"{who} gets {k} boxes with {m} {thing} in each box."


def scale(rng, total, who, pronoun, thing):
    k = rng.choice([2, 3])
    if total * k > 999:
        return None
    word = {2: "doubles", 3: "triples"}[k]
    return total * k, f"Then the number of {thing} {pronoun} has {word}."


def share(rng, total, who, pronoun, thing):
    ways = [k for k in (2, 3, 4, 5) if total % k == 0 and total // k >= 1]
    if not ways:
        return None
    k = rng.choice(ways)
    return total // k, f"{who} shares the {thing} equally among {k} children, {pronoun} included, and keeps one share."


OPERATIONS = [buy, give, boxes, scale, share]


def problem(rng, index):
    name, pronoun = rng.choice(NAMES)
    thing = rng.choice(THINGS)
    total = rng.randint(5, 60)
    sentences = [f"{name} has {total} {thing}."]
    operations = rng.randint(2, 4)
    while operations > 0:
        who = name if len(sentences) == 1 else pronoun.capitalize()
        step = rng.choice(OPERATIONS)(rng, total, who, pronoun, thing)
        if step is None or not 1 <= step[0] <= 999:
            continue
        total, sentence = step
        sentences.append(sentence)
        operations -= 1
    question = f"How many {thing} does {name} have now?"
    return {"id": f"wp-{index:03d}", "prompt": " ".join(sentences + [question]) + "\n" + INSTRUCTION,
            "answer": str(total)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    for i in range(args.count):
        print(json.dumps(problem(rng, i)))


if __name__ == "__main__":
    main()
