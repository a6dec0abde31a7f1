"""The default model's corpus: simple English stories from a vocabulary and grammar written
here, generated with a seed. Characters, animals, places, objects, actions and short
dialogues; number agreement (the cat is / the cats are); names introduced early and
repeated later (so the model must copy them); and the worked example's world ("the cat sat
on the mat", "the dog ran")."""

from __future__ import annotations

import random

NAMES = {
    "Tom": "he",
    "Ben": "he",
    "Sam": "he",
    "Max": "he",
    "Leo": "he",
    "Lily": "she",
    "Mia": "she",
    "Anna": "she",
    "Zoe": "she",
    "Emma": "she",
}
ANIMALS = ["cat", "dog", "bird", "fox", "duck", "frog", "rabbit", "horse", "fish", "bear"]
PLURAL = {a: a + ("" if a == "fish" else "s") for a in ANIMALS}
PLACES = ["the park", "the garden", "the house", "the forest", "the lake", "the school", "the farm", "the beach"]
OBJECTS = ["ball", "kite", "book", "hat", "box", "cake", "apple", "toy", "cup", "boat"]
ADJECTIVES = ["red", "blue", "green", "big", "little", "happy", "small", "old", "new", "funny"]
FEELINGS = ["happy", "sad", "tired", "hungry", "scared", "excited"]
MOVES = {"bird": ["flew", "hopped"], "duck": ["swam", "flew", "walked"], "fish": ["swam"], "frog": ["jumped", "swam"]}
DEFAULT_MOVES = ["ran", "walked", "jumped"]
TOY_WORLD = ["the", "cat", "sat", "on", "dog", "mat", "ran", "and"]


def _cap(sentence: str) -> str:
    return sentence[0].upper() + sentence[1:]


def toy_world_line(rng: random.Random) -> str:
    """A lowercase line in the worked example's eight-word world."""
    animal, other = rng.sample(["cat", "dog"], 2)
    return rng.choice(
        [
            f"the {animal} sat on the mat",
            f"the {animal} ran and the {other} sat on the mat",
            f"the {animal} sat on the mat and the {other} ran",
            f"the {animal} ran",
            f"the {animal} and the {other} sat on the mat",
        ]
    )


def story(rng: random.Random) -> str:
    """One short story; the hero's name, friend and animal recur from start to end."""
    hero, friend = rng.sample(list(NAMES), 2)
    he, she = NAMES[hero], NAMES[friend]
    his = {"he": "his", "she": "her"}[he]
    animal = rng.choice(ANIMALS)
    thing, adj, place = rng.choice(OBJECTS), rng.choice(ADJECTIVES), rng.choice(PLACES)
    count = rng.choice([1, 1, 2, 3])
    pets = f"a {animal}" if count == 1 else f"{['two', 'three'][count - 2]} {PLURAL[animal]}"
    it, was, is_ = ("it", "was", "is") if count == 1 else ("they", "were", "are")
    them = "it" if count == 1 else "them"
    the_pets = f"the {animal}" if count == 1 else f"the {PLURAL[animal]}"
    sentences = [
        rng.choice(
            [
                f"Once upon a time, there was a {'boy' if he == 'he' else 'girl'} named {hero}.",
                f"{hero} lived in a little house near {place}.",
                f"One day, {hero} went to {place}.",
            ]
        ),
        f"{hero} had {pets}.",
        f"{_cap(the_pets)} {was} {rng.choice(ADJECTIVES)}.",
        f"{hero} loved {them} very much.",
    ]
    middles = [
        [
            f"Every morning, {the_pets} {rng.choice(MOVES.get(animal, DEFAULT_MOVES))} to {place}.",
            f"{_cap(it)} {was} very {rng.choice(FEELINGS)}.",
        ],
        [
            f"{hero} met {friend} at {place}.",
            f'"Hello, {friend}!" said {hero}.',
            f'"Hello, {hero}! Do you want to play with me?" said {friend}.',
            f'"Yes!" said {hero}.',
        ],
        [
            f"{hero} had a {adj} {thing}.",
            f"{hero} gave the {thing} to {friend}.",
            f'{friend} said, "Thank you, {hero}!"',
            f"{_cap(she)} was very happy.",
        ],
        [
            f"Then {the_pets} sat on the mat." if animal != "fish" else "Then the cat sat on the mat.",
            f"The cat sat on the mat and the dog ran to {place}.",
        ],
        [
            f"{hero} saw a {(seen := rng.choice(ANIMALS))} in {place}.",
            f"It {rng.choice(MOVES.get(seen, DEFAULT_MOVES))} away and {hero} {rng.choice(['laughed', 'smiled', 'cried'])}.",
        ],
        [
            f"{_cap(the_pets)} {is_} {rng.choice(FEELINGS)} today, said {hero}.",
            f"{hero} and {friend} played with {the_pets} all day.",
        ],
        [
            f"{hero} lost {his} {thing}.",
            f"{hero} looked in {place}, but it was not there.",
            f'"I will help you, {hero}," said {friend}.',
            f"{friend} found the {thing} under the mat.",
        ],
    ]
    for middle in rng.sample(middles, rng.randint(2, 4)):
        sentences += middle
    sentences.append(
        rng.choice(
            [
                f"{hero} and {the_pets} were happy. The end.",
                f"At night, {hero} went to bed. The end.",
                f"{hero} and {friend} were friends forever. The end.",
            ]
        )
    )
    return " ".join(sentences)


def corpus(n_stories: int, seed: int = 0) -> list[str]:
    """``n_stories`` stories, about one in six replaced by a few toy-world lines."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n_stories):
        if rng.random() < 1 / 6:
            texts.append(". ".join(toy_world_line(rng) for _ in range(rng.randint(2, 5))) + ".")
        else:
            texts.append(story(rng))
    return texts
