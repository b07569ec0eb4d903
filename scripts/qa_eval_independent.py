"""An independent extractive-QA evaluation set for tiny-qa-llama (never used for training).

Written separately from ``qa_synth.py`` (the training generator) and sharing nothing with it:
its own name vocabulary (compound place-like names, Nordic/Iberian/West-African-looking
people, codes such as "KV-318", multi-word club and ship names), its own subjects (choirs,
ferries, glaciers, provinces, guilds, kilns, observatories...), its own relations and its own
sentences (prose such as "Rising 212 feet above the harbour, the Saltmere Beacon ...") and its
own question wordings, in two kinds:

- ``like``: plain questions of the shape a user would ask first ("How tall is X?");
- ``new``: reworded ones ("I'd like to know how high X rises.", "X: how many people belong to
  it?", "Which material went into X?"), none of which the training generator produces, its
  rewordings included (``tests/unit/test_qa_data.py`` checks).

Every question has one answer span, written verbatim in exactly one document; the other
documents are distractors about subjects of the same kind (other heights, other founders).
Two splits with different seeds: ``val`` (picks the training checkpoint) and ``test`` (what
the model card reports). ``items(split, n_docs, wording, n)`` returns
``{"documents": [...], "question": ..., "answer": ...}`` dicts, the shape of
``qa_independent.json`` (the hand-written set).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# ----------------------------------------------------------------------------- vocabulary
_PREFIX = [
    "Ash",
    "Thorn",
    "Salt",
    "Elder",
    "Wind",
    "Frost",
    "Marl",
    "Cinder",
    "Bram",
    "Holly",
    "Rook",
    "Tide",
    "Moss",
    "Fern",
    "Iron",
    "Lark",
    "Wren",
    "Cold",
    "Glen",
    "Black",
    "Stone",
    "Amber",
    "Hazel",
    "Otter",
]
_SUFFIX = [
    "mere",
    "wick",
    "holm",
    "fell",
    "gate",
    "combe",
    "stow",
    "by",
    "thwaite",
    "ness",
    "ley",
    "bourne",
    "hurst",
    "wold",
    "garth",
    "shaw",
    "croft",
    "ridge",
    "brook",
    "field",
]
FIRST = [
    "Ingrid",
    "Tomasz",
    "Abena",
    "Oluwaseun",
    "Rosalind",
    "Joaquim",
    "Sigrun",
    "Kwame",
    "Mirela",
    "Anselm",
    "Dagny",
    "Esperanza",
    "Halvard",
    "Yaw",
    "Leocadia",
    "Bartholomew",
    "Solveig",
    "Inês",
    "Kofi",
    "Thurid",
    "Ambrose",
    "Perpetua",
    "Evander",
    "Adaeze",
    "Lisandro",
    "Gudrun",
    "Cosimo",
    "Nnamdi",
    "Florentyna",
    "Odalys",
]
LAST = [
    "Haugland",
    "Mensah",
    "Quaresma",
    "Lindqvist",
    "Adeyemi",
    "Strandberg",
    "Carvalhal",
    "Osei-Bonsu",
    "Whitlow",
    "Fairweather",
    "Nakamura-Holt",
    "Eriksdottir",
    "Valdés",
    "Okafor",
    "Brannock",
    "Tveit",
    "Achterberg",
    "Pennycook",
    "Sandoval",
    "Rasmussen",
    "Oyelaran",
    "Greenhalgh",
    "Marchetti",
    "Boateng",
    "Holmgren",
    "Ferreira",
    "Dunmore",
    "Asante",
    "Kjellberg",
    "Loughton",
]
_TITLES = ["Dr.", "Prof.", "Captain", "Sister", "Judge", "Mx.", "Sir", "Dame"]
MATERIALS = [
    "basalt",
    "teak",
    "copper sheet",
    "reinforced concrete",
    "sandstone",
    "cast iron",
    "oak and glass",
    "limestone blocks",
    "woven bamboo",
    "brass",
    "pink granite",
    "recycled steel",
    "slate",
    "clay brick",
    "cedar planks",
    "white marble",
]
_LANGS = ["Frisian", "Basque", "Twi", "Faroese", "Occitan", "Sardinian", "Yoruba", "Breton", "Romansh", "Sami"]
_COLOURS = ["saffron", "slate blue", "forest green", "burgundy", "ochre", "charcoal", "cream", "scarlet"]
_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


@dataclass
class _Gen:
    rng: random.Random

    def place(self) -> str:
        r = self.rng
        w = r.choice(_PREFIX) + r.choice(_SUFFIX)
        return w if r.random() < 0.7 else f"{r.choice(['Upper', 'Lower', 'North', 'East', 'Port', 'Saint'])} {w}"

    def person(self) -> str:
        r = self.rng
        name = f"{r.choice(FIRST)} {r.choice(LAST)}"
        x = r.random()
        if x < 0.15:
            return f"{r.choice(_TITLES)} {name}"
        if x < 0.25:
            return f"{r.choice(FIRST)} {r.choice('BCDFGHKLMNPRSTW')}. {r.choice(LAST)}"
        if x < 0.32:
            return r.choice(LAST)
        return name

    def code(self) -> str:
        r = self.rng
        return f"{r.choice('KVQXZ')}{r.choice('BCDFHJLMNRTVW')}-{r.randint(10, 999)}"

    def year(self) -> str:
        return str(self.rng.randint(1610, 2021))

    def date(self) -> str:
        r = self.rng
        return f"{r.randint(1, 28)} {r.choice(_MONTHS)} {r.randint(1790, 2020)}"

    def count(self) -> str:
        r = self.rng
        n = r.choice([r.randint(3, 60), r.randint(61, 900), r.randint(1000, 99999)])
        return f"{n:,}" if n >= 1000 and r.random() < 0.5 else str(n)

    def measure(self, units: list[str]) -> str:
        r = self.rng
        v = r.choice([str(r.randint(3, 999)), f"{r.randint(1, 99)}.{r.randint(1, 9)}"])
        return f"{v} {r.choice(units)}"


# subject kinds: a template for the subject's name and the relations that apply
_KINDS = {
    "beacon": ("the {P} Beacon", ["height", "material", "builder", "year", "keeper"]),
    "ferry": ("the ferry {P} Star", ["length", "captain", "year", "crew", "port"]),
    "choir": ("the {P} Choir", ["members", "conductor", "year", "language", "colour"]),
    "guild": ("the Guild of {P}", ["members", "treasurer", "year", "seat", "founder"]),
    "province": ("the province of {P}", ["capital", "population", "language", "governor"]),
    "glacier": ("the {P} Glacier", ["length", "depth", "surveyor", "year"]),
    "kiln": ("the {P} kiln", ["material", "height", "builder", "year", "keeper"]),
    "rover": ("the {C} rover", ["weight", "designer", "date", "crew", "material"]),
    "club": ("the {P} Rowing Club", ["members", "founder", "year", "colour", "seat"]),
    "observatory": ("the {P} Observatory", ["height", "director", "year", "seat", "founder"]),
}

# relation -> (answer kind, fact sentences, "like" questions, "new" questions)
REL: dict[str, tuple[str, list[str], list[str], list[str]]] = {
    "height": (
        "measure:metres|feet|m",
        [
            "{Sc} is {A} tall.",
            "Rising {A} above the ground, {S} can be seen for miles.",
            "{Sc} reaches a height of {A}.",
            "At {A}, {S} is the tallest structure nearby.",
        ],
        ["How tall is {S}?", "What is the height of {S}?"],
        ["I'd like to know how high {S} rises.", "{Sc}: what height does it reach?", "How high does {S} stand?"],
    ),
    "length": (
        "measure:metres|kilometres|km|feet",
        ["{Sc} is {A} long.", "{Sc} stretches for {A}.", "With a length of {A}, {S} is hard to miss."],
        ["How long is {S}?", "What is the length of {S}?"],
        [
            "What distance does {S} cover from end to end?",
            "Over what distance does {S} stretch?",
            "{Sc} - how long is it?",
        ],
    ),
    "depth": (
        "measure:metres|feet",
        ["{Sc} is {A} deep at its thickest point.", "Surveys put the depth of {S} at {A}."],
        ["How deep is {S}?", "What is the depth of {S}?"],
        ["To what depth does {S} go?", "How far down does {S} go?"],
    ),
    "weight": (
        "measure:kilograms|kg|tonnes",
        ["{Sc} weighs {A}.", "Fully loaded, {S} weighs {A}."],
        ["How much does {S} weigh?", "What is the weight of {S}?"],
        ["What does {S} weigh?", "What mass does {S} have?"],
    ),
    "material": (
        "material",
        [
            "{Sc} is made of {A}.",
            "Built almost entirely of {A}, {S} has survived many storms.",
            "The walls of {S} are {A}.",
            "{Sc} was constructed from {A}.",
        ],
        ["What is {S} made of?", "What material is {S} made of?"],
        ["Which material went into {S}?", "Out of what was {S} built?", "What was used to construct {S}?"],
    ),
    "builder": (
        "person",
        ["{Sc} was built by {A}.", "{A} built {S}.", "The builder of {S} was {A}."],
        ["Who built {S}?", "Who was the builder of {S}?"],
        ["Whose work is {S}?", "Which person put up {S}?", "{Sc} was the work of which builder?"],
    ),
    "keeper": (
        "person",
        ["The keeper of {S} is {A}.", "{A} looks after {S}.", "{Sc} is kept by {A}."],
        ["Who is the keeper of {S}?", "Who looks after {S}?"],
        ["Who takes care of {S}?", "Name the keeper of {S}."],
    ),
    "captain": (
        "person",
        ["{Sc} is commanded by {A}.", "The captain of {S} is {A}.", "{A} captains {S}."],
        ["Who is the captain of {S}?", "Who commands {S}?"],
        ["Who is in command of {S}?", "Which captain sails {S}?"],
    ),
    "conductor": (
        "person",
        ["{Sc} is conducted by {A}.", "The conductor of {S} is {A}.", "{A} conducts {S}."],
        ["Who conducts {S}?", "Who is the conductor of {S}?"],
        ["Who leads {S} as conductor?", "Under whose baton does {S} sing?"],
    ),
    "treasurer": (
        "person",
        ["The treasurer of {S} is {A}.", "{A} keeps the accounts of {S} as treasurer."],
        ["Who is the treasurer of {S}?"],
        ["Who handles the money of {S}?", "Which member is treasurer of {S}?"],
    ),
    "governor": (
        "person",
        ["{Sc} is governed by {A}.", "The governor of {S} is {A}."],
        ["Who governs {S}?", "Who is the governor of {S}?"],
        ["Who is in charge of governing {S}?", "Name the governor of {S}."],
    ),
    "surveyor": (
        "person",
        ["{Sc} was first surveyed by {A}.", "{A} made the first survey of {S}."],
        ["Who first surveyed {S}?", "Who surveyed {S}?"],
        ["Which surveyor first mapped {S}?", "Whose survey of {S} came first?"],
    ),
    "designer": (
        "person",
        ["{Sc} was designed by {A}.", "The designer of {S} is {A}."],
        ["Who designed {S}?", "Who is the designer of {S}?"],
        ["Whose design is {S}?", "Which engineer came up with {S}?"],
    ),
    "director": (
        "person",
        ["{Sc} is directed by {A}.", "The director of {S} is {A}.", "{A} runs {S} as director."],
        ["Who directs {S}?", "Who is the director of {S}?"],
        ["Who runs things at {S}?", "Who is in charge at {S}?"],
    ),
    "founder": (
        "person",
        ["{Sc} was founded by {A}.", "{A} founded {S}.", "The founder of {S} was {A}."],
        ["Who founded {S}?", "Who was the founder of {S}?"],
        ["Who set up {S}?", "Who started {S} in the first place?"],
    ),
    "year": (
        "year",
        [
            "{Sc} was established in {A}.",
            "{Sc} dates from {A}.",
            "Since {A}, {S} has been open to visitors.",
            "{Sc} was completed in {A}.",
        ],
        ["When was {S} established?", "In what year was {S} completed?"],
        [
            "How old is {S}: since which year has it existed?",
            "Which year does {S} date from?",
            "When did {S} come into being?",
        ],
    ),
    "date": (
        "date",
        ["{Sc} was launched on {A}.", "On {A}, {S} was launched."],
        ["When was {S} launched?", "On what date was {S} launched?"],
        ["Which day saw the launch of {S}?", "Which day did {S} launch?"],
    ),
    "crew": (
        "count",
        ["{Sc} has a crew of {A}.", "{Sc} carries {A} crew members."],
        ["How many crew does {S} have?", "How big is the crew of {S}?"],
        ["What is the size of the crew of {S}?", "How many people crew {S}?"],
    ),
    "members": (
        "count",
        ["{Sc} has {A} members.", "{A} people belong to {S}.", "Membership of {S} stands at {A}."],
        ["How many members does {S} have?", "How many people belong to {S}?"],
        [
            "How many names are on the member list of {S}?",
            "{Sc}: how many people belong to it?",
            "What is the member count of {S}?",
        ],
    ),
    "population": (
        "count",
        ["{Sc} has a population of {A}.", "{A} people live in {S}."],
        ["What is the population of {S}?", "How many people live in {S}?"],
        ["What number of residents does {S} have?", "How populous is {S}?"],
    ),
    "capital": (
        "place",
        ["The capital of {S} is {A}.", "{A} is the capital of {S}.", "{Sc} is governed from its capital, {A}."],
        ["What is the capital of {S}?", "Which city is the capital of {S}?"],
        ["From which city is {S} governed?", "Where is the seat of government of {S}?"],
    ),
    "seat": (
        "place",
        ["{Sc} is based in {A}.", "{Sc} has its home in {A}.", "{Sc} meets in {A}."],
        ["Where is {S} based?", "Where does {S} have its home?"],
        ["In which town would I find {S}?", "What is the home town of {S}?"],
    ),
    "port": (
        "place",
        ["The home port of {S} is {A}.", "{Sc} sails from {A}."],
        ["What is the home port of {S}?", "Where does {S} sail from?"],
        ["From which harbour does {S} operate?", "Which port is home to {S}?"],
    ),
    "language": (
        "language",
        ["{Sc} sings mostly in {A}.", "The main language of {S} is {A}.", "In {S}, people speak {A}."],
        ["What language is used in {S}?", "What is the main language of {S}?"],
        ["Which tongue is spoken in {S}?", "In what language does {S} work?"],
    ),
    "colour": (
        "colour",
        ["The colours of {S} are {A}.", "{Sc} wears {A}."],
        ["What colour does {S} wear?", "What are the colours of {S}?"],
        ["Which colour is associated with {S}?", "In what colour does {S} appear?"],
    ),
}


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


def _answer(g: _Gen, kind: str) -> str:
    r = g.rng
    if kind.startswith("measure:"):
        return g.measure(kind.split(":", 1)[1].split("|"))
    return {
        "person": g.person,
        "place": g.place,
        "year": g.year,
        "date": g.date,
        "count": g.count,
        "material": lambda: r.choice(MATERIALS),
        "language": lambda: r.choice(_LANGS),
        "colour": lambda: r.choice(_COLOURS),
    }[kind]()


def _subject(g: _Gen, kind: str) -> str:
    tmpl = _KINDS[kind][0]
    return tmpl.format(P=g.place(), C=g.code())


def _doc(g: _Gen, kind: str, subject: str, rels: list[str], used: set[str]) -> tuple[str, dict[str, str]]:
    r = g.rng
    sentences, facts = [], {}
    for rel in rels:
        kind_a, forms, _, _ = REL[rel]
        for _ in range(20):
            ans = _answer(g, kind_a)
            if ans not in used:
                break
        used.add(ans)
        facts[rel] = ans
        sentences.append(r.choice(forms).format(S=subject, Sc=_cap(subject), A=ans))
    return " ".join(sentences), facts


def item(rng: random.Random, n_docs: int, wording: str) -> dict:
    """One question over ``n_docs`` documents; distractors share the asked relation when they can."""
    g = _Gen(rng)
    used: set[str] = set()
    kinds = list(_KINDS)
    target_kind = rng.choice(kinds)
    docs: list[tuple[str, dict[str, str], str]] = []
    subjects: set[str] = set()
    for i in range(n_docs):
        kind = target_kind if (i == 0 or rng.random() < 0.5) else rng.choice(kinds)
        while True:
            subj = _subject(g, kind)
            if subj not in subjects:
                subjects.add(subj)
                break
        rels = _KINDS[kind][1]
        chosen = rng.sample(rels, rng.randint(min(2, len(rels)), len(rels)))
        text, facts = _doc(g, kind, subj, chosen, used)
        docs.append((text, facts, subj))
    text, facts, subj = docs[0]
    rel = rng.choice(list(facts))
    _, _, like, new = REL[rel]
    question = rng.choice(like if wording == "like" else new).format(S=subj, Sc=_cap(subj))
    order = list(range(n_docs))
    rng.shuffle(order)
    return {"documents": [docs[i][0] for i in order], "question": question, "answer": facts[rel], "relation": rel}


SPLIT_SEEDS = {"val": 4_242_001, "test": 9_090_017}


def items(split: str, n_docs: int, wording: str, n: int) -> list[dict]:
    rng = random.Random(SPLIT_SEEDS[split] * 7 + n_docs * 101 + (0 if wording == "like" else 53))
    return [item(rng, n_docs, wording) for _ in range(n)]


if __name__ == "__main__":
    import json

    for it in items("test", 2, "new", 3):
        print(json.dumps(it, indent=1, ensure_ascii=False))
