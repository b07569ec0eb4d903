"""Synthetic extractive-QA data for the embedded tiny-qa-llama model.

Used by ``train_qa_model.py`` (training, fresh samples every step) and ``eval_qa_model.py``
(held-out evaluation). Pure Python, no torch.

Short documents state made-up facts about made-up labs, institutes and people (names built
from syllables, so the model must copy instead of memorising); a question asks for one fact;
the answer is the span copied from the document. Prompts are the shapes the RAG frameworks
send: LlamaIndex's chat text-QA template (system + user) and its completion text-QA and refine
templates, LangChain's RAG-tutorial prompts, and a few plain shapes.

Name split: a name is a *training* name when ``crc32(name) % 8 != 0`` and a *held-out* name
otherwise (``split="train"`` / ``split="heldout"``), so evaluation never sees a training name.
Question wordings are split too: ``wording="train"`` uses the training wordings,
``wording="reworded"`` only wordings that never appear in training.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field

# ----------------------------------------------------------------------------- names
ONSETS = [
    "b",
    "br",
    "bl",
    "c",
    "cr",
    "d",
    "dr",
    "f",
    "fl",
    "g",
    "gr",
    "h",
    "j",
    "k",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "pr",
    "pl",
    "qu",
    "r",
    "s",
    "sh",
    "sk",
    "st",
    "t",
    "tr",
    "th",
    "v",
    "w",
    "z",
    "ch",
    "y",
    "",
]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei", "ou", "ia", "y", "ee", "oa"]
CODAS = ["", "", "", "n", "r", "l", "s", "x", "m", "k", "th", "nd", "rt", "st", "ll", "v", "sh", "z"]
PLACE_SUFFIX = ["", "", "", "", "ville", "burg", "port", "ton", "ford", "haven", "dale", "mouth", "stead"]
ENTITY_KINDS = [
    "Institute",
    "Lab",
    "Laboratory",
    "Foundry",
    "Observatory",
    "Research Center",
    "Works",
    "Collective",
    "Station",
    "Academy",
    "Group",
    "Company",
    "Consortium",
    "Studio",
    "Systems",
]
COLORS = [
    "red",
    "blue",
    "green",
    "yellow",
    "orange",
    "purple",
    "teal",
    "silver",
    "gold",
    "black",
    "white",
    "crimson",
    "violet",
    "amber",
    "indigo",
    "turquoise",
    "grey",
    "pink",
    "bronze",
    "olive",
]
TOPICS = [
    "sparse attention",
    "int4 quantization",
    "low-power inference",
    "speech recognition",
    "memory compression",
    "compiler design",
    "thermal modelling",
    "neural codecs",
    "graph search",
    "on-device vision",
    "battery chemistry",
    "signal processing",
    "robot control",
    "weather forecasting",
    "protein folding",
    "photonic circuits",
    "error correction",
    "cache design",
    "sensor fusion",
    "dataflow scheduling",
    "mixed precision",
    "kernel fusion",
    "token pruning",
    "edge security",
    "audio denoising",
]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def is_heldout_name(word: str) -> bool:
    return zlib.crc32(word.lower().encode()) % 8 == 0


class Names:
    """Made-up words, restricted to the training or the held-out side of the name split."""

    def __init__(self, rng: random.Random, split: str) -> None:
        self.rng = rng
        self.heldout = split == "heldout"

    def _raw(self, lo: int, hi: int) -> str:
        r = self.rng
        mode = r.random()
        if mode < 0.8:
            n = r.randint(lo, hi)
            w = "".join(
                r.choice(ONSETS) + r.choice(VOWELS) + (r.choice(CODAS) if r.random() < 0.6 else "") for _ in range(n)
            )
        else:  # letter soup: tokenizes unlike syllables, teaches byte-level copying
            n = r.randint(3, 8)
            letters = "abcdefghijklmnopqrstuvwxyz"
            w = "".join(r.choice(letters) for _ in range(n))
        return w

    def word(self, lo: int = 2, hi: int = 3) -> str:
        while True:
            w = self._raw(lo, hi)
            if 3 <= len(w) <= 14 and is_heldout_name(w) == self.heldout:
                return w.capitalize()

    def person(self) -> str:
        r = self.rng
        first = self.word(1, 2)
        last = self.word(2, 3)
        if r.random() < 0.1:
            return f"Dr. {first} {last}"
        if r.random() < 0.08:
            return f"{first} {self.rng.choice('ABCDEFGHJKLMNPRSTVW')}. {last}"
        return f"{first} {last}"

    def place(self) -> str:
        return self.word(2, 3) + self.rng.choice(PLACE_SUFFIX)

    def entity(self) -> str:
        return f"{self.word(2, 3)} {self.rng.choice(ENTITY_KINDS)}"

    def chip(self) -> str:
        r = self.rng
        w = self.word(1, 2)
        m = r.random()
        if m < 0.4:
            return f"{w}-{r.randint(1, 99)}"
        if m < 0.6:
            return f"{w} {r.choice(['X', 'Pro', 'Mini', 'One', 'Max', 'Neo'])}"
        return w


# ----------------------------------------------------------------------------- relations
@dataclass
class Relation:
    name: str
    subject: str  # "entity" or "person"
    facts: list[str]
    train_q: list[str]
    reworded_q: list[str]
    kind: str = ""  # answer kind for the generated relations (year, person, place, number, word, ...)


# {S} = subject as it appears mid-sentence ("the Zorbl Institute" / "Mira Tenholt"),
# {Sc} = the same at sentence start, {A} = the answer.
RELATIONS = [
    Relation(
        "founded_year",
        "entity",
        ["{Sc} was founded in {A}.", "{Sc} was established in {A}.", "{Sc} opened in {A}.", "In {A}, {S} was founded."],
        [
            "When was {S} founded?",
            "In which year was {S} founded?",
            "What year was {S} founded?",
            "When was {S} established?",
            "In what year was {S} established?",
            "What is the founding year of {S}?",
            "When did {S} open?",
        ],
        [
            "Tell me the year {S} was founded.",
            "{Sc} was founded in what year?",
            "Which year saw the founding of {S}?",
            "How long ago... no: in which year did {S} get started?",
        ],
    ),
    Relation(
        "founder",
        "entity",
        ["{Sc} was founded by {A}.", "{A} founded {S}.", "{Sc} was started by {A}.", "The founder of {S} is {A}."],
        [
            "Who founded {S}?",
            "Who was the founder of {S}?",
            "Who started {S}?",
            "Who is the founder of {S}?",
            "By whom was {S} founded?",
        ],
        ["Name the person who founded {S}.", "Which person set up {S}?", "{Sc} was founded by whom?"],
    ),
    Relation(
        "location",
        "entity",
        [
            "{Sc} is located in {A}.",
            "{Sc} is based in {A}.",
            "The headquarters of {S} are in {A}.",
            "{Sc} sits in the city of {A}.",
        ],
        [
            "Where is {S} located?",
            "In which city is {S} located?",
            "Where is {S} based?",
            "Where are the headquarters of {S}?",
            "In which city is {S}?",
        ],
        ["What city is {S} in?", "Which town hosts {S}?", "Where can one find {S}?"],
    ),
    Relation(
        "director",
        "entity",
        ["{Sc} is led by {A}.", "The director of {S} is {A}.", "{A} directs {S}.", "{Sc} is run by {A}."],
        [
            "Who leads {S}?",
            "Who is the director of {S}?",
            "Who runs {S}?",
            "Who directs {S}?",
            "Who is the head of {S}?",
        ],
        ["Who is in charge of {S}?", "Name the director of {S}.", "Which person heads {S}?"],
    ),
    Relation(
        "staff",
        "entity",
        [
            "{Sc} employs {A} people.",
            "{Sc} has {A} employees.",
            "{A} people work at {S}.",
            "The staff of {S} numbers {A}.",
        ],
        [
            "How many people does {S} employ?",
            "How many employees does {S} have?",
            "How many people work at {S}?",
            "How large is the staff of {S}?",
        ],
        [
            "What is the headcount of {S}?",
            "How many staff members are there at {S}?",
            "Give the number of employees at {S}.",
        ],
    ),
    Relation(
        "chip",
        "entity",
        [
            "{Sc} designed a chip called {A}.",
            "The main chip of {S} is {A}.",
            "{Sc} builds the {A} accelerator.",
            "{A} is the chip designed by {S}.",
        ],
        [
            "What chip did {S} design?",
            "What is the name of the chip designed by {S}?",
            "Which chip does {S} build?",
            "What is the main chip of {S}?",
        ],
        ["Which accelerator comes from {S}?", "Name the chip made by {S}.", "What processor did {S} create?"],
    ),
    Relation(
        "color",
        "entity",
        ["The logo of {S} is {A}.", "{Sc} uses a {A} logo.", "{Sc} has a {A} logo."],
        ["What color is the logo of {S}?", "What is the color of the logo of {S}?", "What colour is the logo of {S}?"],
        ["Which colour does the logo of {S} have?", "The logo of {S} is what color?"],
    ),
    Relation(
        "topic",
        "entity",
        [
            "{Sc} studies {A}.",
            "The research focus of {S} is {A}.",
            "{Sc} works on {A}.",
            "Researchers at {S} study {A}.",
        ],
        [
            "What does {S} study?",
            "What is the research focus of {S}?",
            "What does {S} work on?",
            "What do researchers at {S} study?",
        ],
        ["Which field does {S} research?", "What is {S} known for researching?", "What area does {S} focus on?"],
    ),
    Relation(
        "birthplace",
        "person",
        ["{Sc} was born in {A}.", "{Sc} grew up in {A}.", "{Sc} comes from {A}."],
        ["Where was {S} born?", "In which city was {S} born?", "Where does {S} come from?", "Where did {S} grow up?"],
        ["What is the hometown of {S}?", "What is the birthplace of {S}?", "Which city is {S} from?"],
    ),
    Relation(
        "birth_year",
        "person",
        ["{Sc} was born in {A}.", "{Sc}, born in {A}, is a researcher."],
        ["When was {S} born?", "In which year was {S} born?", "What year was {S} born?"],
        ["What is the birth year of {S}?", "In what year was {S} born?", "Tell me when {S} was born."],
    ),
    Relation(
        "pet",
        "person",
        ["{Sc} has a pet named {A}.", "{Sc} owns a cat called {A}.", "The dog of {S} is named {A}."],
        ["What is the name of the pet of {S}?", "What is the name of {S}'s pet?", "What is {S}'s pet called?"],
        ["How is the pet of {S} called?", "What did {S} name the pet?"],
    ),
]
# fix a slip in one wording
RELATIONS[0].reworded_q[3] = "In which year did {S} get started?"
REL = {r.name: r for r in RELATIONS}

# Things other than labs: "the Zorblax reactor", "the bridge of Quenmar". Their facts come from
# generated relations (a verb or an attribute each), so the model learns to match the question's
# words against the document instead of a dozen fixed phrasings.
OBJECT_KINDS = [
    "reactor",
    "bridge",
    "ship",
    "telescope",
    "festival",
    "museum",
    "library",
    "satellite",
    "engine",
    "tower",
    "garden",
    "orchestra",
    "robot",
    "canal",
    "dam",
    "theatre",
    "lighthouse",
    "railway",
    "mine",
    "vaccine",
    "painting",
    "statue",
    "school",
    "hospital",
    "market",
    "castle",
    "airport",
    "stadium",
    "river",
    "island",
]
# (participle, past tense) of verbs a thing undergoes
VERBS = [
    ("built", "built"),
    ("designed", "designed"),
    ("commissioned", "commissioned"),
    ("discovered", "discovered"),
    ("launched", "launched"),
    ("restored", "restored"),
    ("funded", "funded"),
    ("invented", "invented"),
    ("repaired", "repaired"),
    ("renovated", "renovated"),
    ("inspected", "inspected"),
    ("planned", "planned"),
    ("photographed", "photographed"),
    ("bought", "bought"),
    ("sold", "sold"),
    ("painted", "painted"),
    ("rebuilt", "rebuilt"),
    ("mapped", "mapped"),
    ("named", "named"),
    ("opened", "opened"),
]
# attribute name -> answer kind
ATTRIBUTES = {
    "motto": "word",
    "nickname": "word",
    "mascot": "word",
    "code name": "word",
    "main colour": "color",
    "official language": "word",
    "currency": "word",
    "owner": "person",
    "architect": "person",
    "captain": "person",
    "curator": "person",
    "home port": "place",
    "capital": "place",
    "closest town": "place",
}
# measurement -> (unit, question)
MEASURES = {
    "long": ("meters", "How long is {S}?"),
    "tall": ("meters", "How tall is {S}?"),
    "wide": ("meters", "How wide is {S}?"),
    "heavy": ("tons", "How heavy is {S}?"),
    "old": ("years", "How old is {S}?"),
    "deep": ("meters", "How deep is {S}?"),
}


def _generated_relations() -> list[Relation]:
    out: list[Relation] = []
    for part, past in VERBS:
        out.append(
            Relation(
                f"when_{part}",
                "object",
                [
                    f"{{Sc}} was {part} in {{A}}.",
                    f"In {{A}}, {{S}} was {part}.",
                    f"{{Sc}}, {part} in {{A}}, is still in use.",
                ],
                [f"When was {{S}} {part}?", f"In which year was {{S}} {part}?", f"In what year was {{S}} {part}?"],
                [
                    f"What year was {{S}} {part}?",
                    f"{{Sc}} was {part} in which year?",
                    f"Tell me the year {{S}} was {part}.",
                ],
                kind="year",
            )
        )
        out.append(
            Relation(
                f"who_{part}",
                "object",
                [f"{{Sc}} was {part} by {{A}}.", f"{{A}} {past} {{S}}.", f"In the end, {{A}} {past} {{S}}."],
                [f"Who {past} {{S}}?", f"By whom was {{S}} {part}?", f"Which person {past} {{S}}?"],
                [f"{{Sc}} was {part} by whom?", f"Who was {{S}} {part} by?", f"Name the person who {past} {{S}}."],
                kind="person",
            )
        )
        out.append(
            Relation(
                f"where_{part}",
                "object",
                [f"{{Sc}} was {part} in {{A}}.", f"{{Sc}} was {part} in the town of {{A}}."],
                [f"Where was {{S}} {part}?", f"In which town was {{S}} {part}?", f"In which city was {{S}} {part}?"],
                [
                    f"{{Sc}} was {part} where?",
                    f"Which town was {{S}} {part} in?",
                    f"Name the place where {{S}} was {part}.",
                ],
                kind="place",
            )
        )
    for attr, kind in ATTRIBUTES.items():
        out.append(
            Relation(
                f"attr_{attr}",
                "object",
                [
                    f"The {attr} of {{S}} is {{A}}.",
                    f"{{Sc}} has {{A}} as its {attr}.",
                    f"{{A}} is the {attr} of {{S}}.",
                ],
                [
                    f"What is the {attr} of {{S}}?",
                    f"Who is the {attr} of {{S}}?" if kind == "person" else f"Which {attr} does {{S}} have?",
                ],
                [f"Tell me the {attr} of {{S}}.", f"{{Sc}} has which {attr}?", f"What {attr} does {{S}} have?"],
                kind=kind,
            )
        )
    for adj, (unit, q) in MEASURES.items():
        out.append(
            Relation(
                f"measure_{adj}",
                "object",
                [f"{{Sc}} is {{A}} {adj}.", f"{{Sc}} measures {{A}} {adj}." if adj != "old" else "{Sc} is {A} old."],
                [q, q.replace("How", "Exactly how")],
                [
                    q.replace(
                        "How " + adj + " is {S}?",
                        "What is the "
                        + {
                            "long": "length",
                            "tall": "height",
                            "wide": "width",
                            "heavy": "weight",
                            "old": "age",
                            "deep": "depth",
                        }[adj]
                        + " of {S}?",
                    )
                ],
                kind="measure:" + unit,
            )
        )
    for count in ["rooms", "floors", "members", "windows", "engines", "towers", "gates", "bells", "cars", "seats"]:
        out.append(
            Relation(
                f"count_{count}",
                "object",
                [f"{{Sc}} has {{A}} {count}.", f"There are {{A}} {count} in {{S}}."],
                [f"How many {count} does {{S}} have?", f"How many {count} are there in {{S}}?"],
                [f"What is the number of {count} in {{S}}?", f"Count the {count} of {{S}}: how many?"],
                kind="number",
            )
        )
    return out


GENERATED = _generated_relations()
REL.update({r.name: r for r in GENERATED})

FILLERS = [
    "{Sc} is known for its quiet campus.",
    "Visitors often praise the library of {S}.",
    "{Sc} publishes a yearly report.",
    "Many students apply to {S} every spring.",
    "{Sc} shares its results openly.",
    "The building of {S} has large windows.",
    "{Sc} hosts a small conference each year.",
    "{Sc} collaborates with several universities.",
]


def _answer(rel: str, names: Names) -> str:
    r = names.rng
    kind = REL[rel].kind
    if kind:
        if kind == "year":
            return str(r.randint(1700, 2030))
        if kind == "person":
            return names.person()
        if kind == "place":
            return names.place()
        if kind == "number":
            return str(r.choice([r.randint(2, 99), r.randint(100, 9999)]))
        if kind == "color":
            return r.choice(COLORS)
        if kind.startswith("measure:"):
            return f"{r.randint(2, 950)} {kind.split(':', 1)[1]}"
        return names.word(1, 3)
    if rel in ("founded_year", "birth_year"):
        return str(r.randint(1820, 2024))
    if rel in ("founder", "director"):
        return names.person()
    if rel in ("location", "birthplace"):
        return names.place()
    if rel == "staff":
        return str(r.choice([r.randint(3, 99), r.randint(100, 999), r.randint(1000, 9999)]))
    if rel == "chip":
        return names.chip()
    if rel == "color":
        return r.choice(COLORS)
    if rel == "topic":
        return r.choice(TOPICS)
    if rel == "pet":
        return names.word(1, 2)
    raise KeyError(rel)


@dataclass
class Fact:
    rel: str
    subject: str  # as written mid-sentence
    answer: str


@dataclass
class Doc:
    title: str
    text: str
    facts: list[Fact] = field(default_factory=list)
    slug: str = ""


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


def make_object_doc(names: Names, used: set[str]) -> Doc:
    """One document about a made-up thing ("the Zorblax reactor") with 1-4 generated facts."""
    r = names.rng
    while True:
        name, kind = names.word(2, 3), r.choice(OBJECT_KINDS)
        title = f"{name} {kind}" if r.random() < 0.7 else f"{kind} of {name}"
        if title not in used:
            used.add(title)
            break
    subj = "the " + title
    sentences: list[str] = []
    facts: list[Fact] = []
    seen_text: set[str] = set()
    for rel in r.sample(GENERATED, r.choice([1, 2, 2, 3, 3, 4])):
        ans = _answer(rel.name, names)
        fact_text = rel.facts[0].split("{A}")[0]  # one "was built in" per document: no ambiguity
        if (
            ans in used
            or fact_text in seen_text
            or (
                rel.kind in ("year", "place")
                and any(f.rel.split("_", 1)[-1] == rel.name.split("_", 1)[-1] for f in facts)
            )
        ):
            continue
        used.add(ans)
        seen_text.add(fact_text)
        sentences.append(r.choice(rel.facts).format(S=subj, Sc=_cap(subj), A=ans))
        facts.append(Fact(rel.name, subj, ans))
    if not facts:
        return make_object_doc(names, used)
    return Doc(title=_cap(title), text=" ".join(sentences), facts=facts, slug=title.lower().replace(" ", "_"))


def make_doc(names: Names, used: set[str]) -> Doc:
    """One document about a made-up entity (and its people): 2-6 facts plus filler; 45% of the
    documents are about a made-up thing instead (``make_object_doc``)."""
    r = names.rng
    if r.random() < 0.45:
        return make_object_doc(names, used)
    while True:
        ent = names.entity()
        if ent not in used:
            used.add(ent)
            break
    subj = ("the " + ent) if r.random() < 0.85 else ent
    sentences: list[str] = []
    facts: list[Fact] = []
    rels = ["founded_year", "founder", "location", "director", "staff", "chip", "color", "topic"]
    chosen = r.sample(rels, r.choice([1, 2, 2, 3, 3, 4]))
    people: list[str] = []
    for rel in chosen:
        ans = _answer(rel, names)
        if ans in used:
            continue
        used.add(ans)
        tmpl = r.choice(REL[rel].facts)
        sentences.append(tmpl.format(S=subj, Sc=_cap(subj), A=ans))
        facts.append(Fact(rel, subj, ans))
        if rel in ("founder", "director"):
            people.append(ans)
    for person in people:
        if r.random() < 0.3:
            prel = r.choice(["birthplace", "birth_year", "pet"])
            ans = _answer(prel, names)
            if ans in used:
                continue
            used.add(ans)
            sentences.append(r.choice(REL[prel].facts).format(S=person, Sc=person, A=ans))
            facts.append(Fact(prel, person, ans))
    if r.random() < 0.25:
        sentences.insert(r.randint(0, len(sentences)), r.choice(FILLERS).format(S=subj, Sc=_cap(subj)))
    # the first sentence introduces the subject; keep order mostly natural
    body = " ".join(sentences)
    slug = ent.lower().replace(" ", "_")
    return Doc(title=ent, text=body, facts=facts, slug=slug)


# ----------------------------------------------------------------------------- broad facts
# A second family of documents, wider than the lab/thing facts above: subjects of many kinds
# (groups, countries, towns, buildings, ships, mountains, people...), names of every shape,
# relations with units, counts, capitals, roles and materials, each fact in several phrasings,
# questions in free-form wordings, distractor documents about subjects of the same kind (so
# they share the question's words) and 1-10 facts per document.
REAL_FIRST = [
    "Mira",
    "Jonas",
    "Helena",
    "Omar",
    "Lucia",
    "Pavel",
    "Greta",
    "Samir",
    "Nadia",
    "Felix",
    "Clara",
    "Tariq",
    "Elena",
    "Hugo",
    "Maya",
    "Viktor",
    "Amara",
    "Lena",
    "Rafael",
    "Ada",
    "Emil",
    "Zofia",
    "Kenji",
    "Priya",
    "Mateo",
    "Ines",
    "Arjun",
    "Freya",
    "Dmitri",
    "Leila",
    "Oscar",
    "Yara",
    "Bruno",
    "Hana",
    "Ivo",
    "Selma",
]
REAL_LAST = [
    "Novak",
    "Schmidt",
    "Petrov",
    "Moreau",
    "Rossi",
    "Kowalski",
    "Jensen",
    "Haddad",
    "Tanaka",
    "Silva",
    "Weber",
    "Costa",
    "Nilsson",
    "Ivanova",
    "Dubois",
    "Becker",
    "Rahman",
    "Horvat",
    "Castillo",
    "Berg",
    "Fischer",
    "Lopez",
    "Sato",
    "Meyer",
    "Kovacs",
    "Duarte",
    "Larsen",
    "Ferraro",
    "Brennan",
    "Okafor-Lind",
]
TITLES = ["Dr.", "Prof.", "Mr.", "Mrs.", "Ms.", "Captain", "Sir", "Lady", "Father", "General"]
MATERIALS = [
    "granite",
    "oak",
    "steel",
    "glass",
    "brick",
    "concrete",
    "bronze",
    "marble",
    "pine",
    "copper",
    "iron",
    "bamboo",
    "limestone",
    "aluminium",
    "carbon fibre",
    "stainless steel",
    "red brick",
    "reinforced glass",
    "volcanic rock",
    "rammed earth",
]
LANGUAGES = [
    "Welsh",
    "Catalan",
    "Maltese",
    "Estonian",
    "Icelandic",
    "Swahili",
    "Tagalog",
    "Latvian",
    "Galician",
    "Gaelic",
    "Esperanto",
    "Basque",
]
UNITS = {
    "height": ["meters", "m", "feet", "ft", "metres"],
    "length": ["meters", "km", "kilometers", "miles", "feet"],
    "weight": ["kg", "kilograms", "tons", "tonnes", "pounds"],
    "depth": ["meters", "feet", "m"],
    "area": ["square kilometers", "hectares", "acres", "km2"],
    "speed": ["km/h", "knots", "mph"],
    "age": ["years"],
    "price": ["euros", "dollars", "pounds"],
    "capacity": ["liters", "litres", "gallons"],
}

# subject kind -> (name patterns, relations); {N} a made-up name, {W} a one-word name
BROAD_KINDS: dict[str, tuple[list[str], list[str]]] = {
    "group": (
        [
            "the {N} Club",
            "the {N} Society",
            "the {N} Band",
            "the {N} Choir",
            "the {N} Union",
            "the {N}s",
            "the Order of {W}",
            "the {N} Team",
        ],
        ["members", "founded", "founder", "leader", "treasurer", "base", "colour", "anthem", "coach"],
    ),
    "country": (
        ["{W}", "the Republic of {W}", "the Kingdom of {W}", "{W}land"],
        ["capital", "population", "language", "currency", "ruler", "area", "founded", "anthem"],
    ),
    "town": (
        ["{W}", "{W}ton", "{W}ville", "Port {W}", "{W} Falls", "New {W}"],
        ["population", "mayor", "founded", "river", "area", "twin", "founder"],
    ),
    "building": (
        [
            "the {N} Tower",
            "the {N} Hall",
            "the {N} Library",
            "the {N} Bridge",
            "the {N} Cathedral",
            "the {N} Stadium",
            "the {N} Arch",
            "{N} House",
        ],
        ["height", "material", "architect", "built", "floors", "owner", "location", "length", "seats"],
    ),
    "vehicle": (
        ["the {N}", "the ship {W}", "the {W} Express", "the airship {W}", "the {C} locomotive", "the {C} probe"],
        ["length", "weight", "speed", "captain", "crew", "built", "builder", "material", "launched"],
    ),
    "nature": (
        ["Mount {W}", "Lake {W}", "the {W} River", "the {W} Forest", "the {W} Valley", "{W} Island", "the {W} Desert"],
        ["height", "depth", "length", "area", "discovered", "discoverer", "location", "age"],
    ),
    "person": (
        ["{P}"],
        ["born_year", "born_place", "job", "employer", "spouse", "height_p", "instrument", "mentor", "pet"],
    ),
    "product": (
        ["the {C}", "the {W} {C}", "{W} {C}", "the {N} lamp", "the {N} drill"],
        ["price", "weight", "maker", "released", "material", "capacity", "inventor", "colour"],
    ),
}

# relation -> (answer kind, fact phrasings, question wordings). {S}/{Sc} subject, {A} answer.
BROAD_RELS: dict[str, tuple[str, list[str], list[str]]] = {
    "members": (
        "count",
        [
            "{Sc} has {A} members.",
            "{A} people are members of {S}.",
            "The membership of {S} is {A}.",
            "{Sc} counts {A} members.",
            "There are {A} members in {S}.",
        ],
        [
            "How many members does {S} have?",
            "How many people are members of {S}?",
            "What is the membership of {S}?",
            "How many members are in {S}?",
            "How big is {S}?",
            "How many people belong to {S}?",
        ],
    ),
    "founded": (
        "year",
        [
            "{Sc} was founded in {A}.",
            "{Sc} was established in {A}.",
            "{Sc} dates back to {A}.",
            "In {A}, {S} was founded.",
            "Founded in {A}, {S} grew quickly.",
            "{Sc} has existed since {A}.",
        ],
        [
            "When was {S} founded?",
            "In which year was {S} founded?",
            "When was {S} established?",
            "What year does {S} date back to?",
            "Since when has {S} existed?",
            "What is the founding year of {S}?",
        ],
    ),
    "founder": (
        "person",
        ["{Sc} was founded by {A}.", "{A} founded {S}.", "The founder of {S} was {A}.", "{A} started {S}."],
        ["Who founded {S}?", "Who was the founder of {S}?", "Who started {S}?", "Which person founded {S}?"],
    ),
    "leader": (
        "person",
        ["{Sc} is led by {A}.", "The leader of {S} is {A}.", "{A} leads {S}.", "{A} is the head of {S}."],
        ["Who leads {S}?", "Who is the leader of {S}?", "Who is the head of {S}?", "Who is in charge of {S}?"],
    ),
    "treasurer": (
        "person",
        ["The treasurer of {S} is {A}.", "{A} is the treasurer of {S}.", "{A} serves as treasurer of {S}."],
        ["Who is the treasurer of {S}?", "Who serves as treasurer of {S}?"],
    ),
    "coach": (
        "person",
        ["{Sc} is coached by {A}.", "The coach of {S} is {A}.", "{A} coaches {S}."],
        ["Who coaches {S}?", "Who is the coach of {S}?"],
    ),
    "base": (
        "place",
        ["{Sc} is based in {A}.", "{Sc} meets in {A}.", "The home of {S} is {A}.", "{Sc} has its base in {A}."],
        ["Where is {S} based?", "Where does {S} meet?", "Where is the home of {S}?", "In which town is {S} based?"],
    ),
    "location": (
        "place",
        ["{Sc} is located in {A}.", "{Sc} stands in {A}.", "{Sc} can be found in {A}.", "{Sc} lies in {A}."],
        [
            "Where is {S} located?",
            "Where is {S}?",
            "In which place is {S}?",
            "Where does {S} stand?",
            "Where can {S} be found?",
        ],
    ),
    "colour": (
        "colour",
        ["The colour of {S} is {A}.", "{Sc} is painted {A}.", "The colours of {S} are {A}.", "{Sc} wears {A}."],
        ["What colour is {S}?", "What is the colour of {S}?", "What color is {S}?", "Which colour does {S} use?"],
    ),
    "anthem": (
        "title",
        ["The anthem of {S} is called {A}.", "{Sc} has an anthem named {A}.", "{A} is the anthem of {S}."],
        ["What is the anthem of {S}?", "What is the anthem of {S} called?"],
    ),
    "capital": (
        "place",
        [
            "The capital of {S} is {A}.",
            "{A} is the capital of {S}.",
            "{Sc} has {A} as its capital.",
            "{Sc} is governed from {A}, its capital.",
        ],
        [
            "What is the capital of {S}?",
            "Which city is the capital of {S}?",
            "What is the capital city of {S}?",
            "Name the capital of {S}.",
        ],
    ),
    "population": (
        "count",
        [
            "{Sc} has a population of {A}.",
            "{A} people live in {S}.",
            "The population of {S} is {A}.",
            "About {A} people live in {S}.",
        ],
        ["What is the population of {S}?", "How many people live in {S}?", "How many inhabitants does {S} have?"],
    ),
    "language": (
        "language",
        [
            "The language of {S} is {A}.",
            "People in {S} speak {A}.",
            "{A} is spoken in {S}.",
            "The official language of {S} is {A}.",
        ],
        [
            "What language is spoken in {S}?",
            "What is the language of {S}?",
            "What do people in {S} speak?",
            "What is the official language of {S}?",
        ],
    ),
    "currency": (
        "word",
        ["The currency of {S} is the {A}.", "{Sc} pays with the {A}.", "People in {S} pay in {A}s."],
        ["What is the currency of {S}?", "What currency does {S} use?"],
    ),
    "ruler": (
        "person",
        ["{Sc} is ruled by {A}.", "The ruler of {S} is {A}.", "{A} rules {S}."],
        ["Who rules {S}?", "Who is the ruler of {S}?"],
    ),
    "mayor": (
        "person",
        ["The mayor of {S} is {A}.", "{A} is the mayor of {S}.", "{Sc} elected {A} as mayor."],
        ["Who is the mayor of {S}?", "Who was elected mayor of {S}?"],
    ),
    "river": (
        "word_river",
        ["{Sc} lies on the {A}.", "The {A} flows through {S}."],
        ["Which river flows through {S}?", "On which river does {S} lie?"],
    ),
    "twin": (
        "place",
        ["{Sc} is twinned with {A}.", "The twin town of {S} is {A}."],
        ["What is the twin town of {S}?", "Which town is {S} twinned with?"],
    ),
    "area": (
        "measure:area",
        ["{Sc} covers {A}.", "The area of {S} is {A}.", "{Sc} has an area of {A}."],
        ["How large is {S}?", "What is the area of {S}?", "How much land does {S} cover?"],
    ),
    "height": (
        "measure:height",
        [
            "{Sc} is {A} tall.",
            "{Sc} is {A} high.",
            "The height of {S} is {A}.",
            "{Sc} rises to {A}.",
            "{Sc} stands {A} tall.",
        ],
        ["How tall is {S}?", "What is the height of {S}?", "How high is {S}?", "How tall does {S} stand?"],
    ),
    "height_p": (
        "measure:height_p",
        ["{Sc} is {A} tall.", "{Sc} stands {A} tall."],
        ["How tall is {S}?", "What is the height of {S}?"],
    ),
    "length": (
        "measure:length",
        ["{Sc} is {A} long.", "The length of {S} is {A}.", "{Sc} measures {A} in length.", "{Sc} stretches {A}."],
        ["How long is {S}?", "What is the length of {S}?", "How far does {S} stretch?"],
    ),
    "depth": (
        "measure:depth",
        ["{Sc} is {A} deep.", "The depth of {S} is {A}.", "{Sc} reaches a depth of {A}."],
        ["How deep is {S}?", "What is the depth of {S}?"],
    ),
    "weight": (
        "measure:weight",
        ["{Sc} weighs {A}.", "The weight of {S} is {A}.", "{Sc} has a weight of {A}."],
        ["How much does {S} weigh?", "What is the weight of {S}?", "How heavy is {S}?"],
    ),
    "speed": (
        "measure:speed",
        ["{Sc} reaches {A}.", "The top speed of {S} is {A}.", "{Sc} can travel at {A}."],
        ["How fast is {S}?", "What is the top speed of {S}?", "How fast can {S} travel?"],
    ),
    "age": (
        "measure:age",
        ["{Sc} is {A} old.", "The age of {S} is {A}."],
        ["How old is {S}?", "What is the age of {S}?"],
    ),
    "price": (
        "measure:price",
        ["{Sc} costs {A}.", "The price of {S} is {A}.", "{Sc} sells for {A}."],
        ["How much does {S} cost?", "What is the price of {S}?"],
    ),
    "capacity": (
        "measure:capacity",
        ["{Sc} holds {A}.", "The capacity of {S} is {A}."],
        ["How much does {S} hold?", "What is the capacity of {S}?"],
    ),
    "material": (
        "material",
        [
            "{Sc} is made of {A}.",
            "{Sc} was built from {A}.",
            "The material of {S} is {A}.",
            "{Sc} is made from {A}.",
            "{Sc} was constructed of {A}.",
        ],
        [
            "What is {S} made of?",
            "What material is {S} made of?",
            "What was {S} built from?",
            "Which material was used for {S}?",
            "What is the material of {S}?",
        ],
    ),
    "architect": (
        "person",
        ["{Sc} was designed by {A}.", "The architect of {S} was {A}.", "{A} designed {S}."],
        ["Who designed {S}?", "Who was the architect of {S}?", "Which architect designed {S}?"],
    ),
    "built": (
        "year",
        [
            "{Sc} was built in {A}.",
            "{Sc} was completed in {A}.",
            "Construction of {S} ended in {A}.",
            "In {A}, {S} was built.",
        ],
        ["When was {S} built?", "In which year was {S} built?", "When was {S} completed?", "What year was {S} built?"],
    ),
    "floors": (
        "count",
        ["{Sc} has {A} floors.", "There are {A} floors in {S}."],
        ["How many floors does {S} have?", "How many floors are in {S}?"],
    ),
    "seats": (
        "count",
        ["{Sc} has {A} seats.", "{Sc} seats {A} people.", "{Sc} can hold {A} people."],
        ["How many seats does {S} have?", "How many people can {S} hold?", "How many people does {S} seat?"],
    ),
    "owner": (
        "person",
        ["{Sc} is owned by {A}.", "The owner of {S} is {A}.", "{A} owns {S}."],
        ["Who owns {S}?", "Who is the owner of {S}?"],
    ),
    "captain": (
        "person",
        ["The captain of {S} is {A}.", "{Sc} is captained by {A}.", "{A} commands {S}."],
        ["Who is the captain of {S}?", "Who commands {S}?", "Who captains {S}?"],
    ),
    "crew": (
        "count",
        ["{Sc} has a crew of {A}.", "{Sc} carries {A} crew.", "The crew of {S} numbers {A}."],
        ["How many crew does {S} have?", "How large is the crew of {S}?", "How many crew members does {S} carry?"],
    ),
    "builder": (
        "person",
        ["{Sc} was built by {A}.", "{A} built {S}.", "The builder of {S} was {A}."],
        ["Who built {S}?", "Who was the builder of {S}?"],
    ),
    "launched": (
        "date",
        ["{Sc} was launched on {A}.", "On {A}, {S} was launched.", "{Sc} was first launched on {A}."],
        ["When was {S} launched?", "On what date was {S} launched?", "What was the launch date of {S}?"],
    ),
    "discovered": (
        "year",
        ["{Sc} was discovered in {A}.", "{Sc} was first mapped in {A}."],
        ["When was {S} discovered?", "In which year was {S} discovered?", "When was {S} first mapped?"],
    ),
    "discoverer": (
        "person",
        ["{Sc} was discovered by {A}.", "{A} discovered {S}.", "{Sc} was first mapped by {A}."],
        ["Who discovered {S}?", "Who first mapped {S}?"],
    ),
    "born_year": (
        "year",
        ["{Sc} was born in {A}.", "{Sc}, born in {A}, still works every day."],
        ["When was {S} born?", "In which year was {S} born?", "What year was {S} born?"],
    ),
    "born_place": (
        "place",
        ["{Sc} was born in {A}.", "{Sc} grew up in {A}.", "{Sc} comes from {A}."],
        ["Where was {S} born?", "Where does {S} come from?", "Where did {S} grow up?"],
    ),
    "job": (
        "job",
        ["{Sc} works as a {A}.", "{Sc} is a {A}.", "By profession, {S} is a {A}."],
        ["What does {S} do for a living?", "What is the job of {S}?", "What is {S}'s profession?"],
    ),
    "employer": (
        "org",
        ["{Sc} works for {A}.", "{Sc} is employed by {A}.", "The employer of {S} is {A}."],
        ["Who does {S} work for?", "Who employs {S}?", "Where does {S} work?"],
    ),
    "spouse": (
        "person",
        ["{Sc} is married to {A}.", "The spouse of {S} is {A}."],
        ["Who is {S} married to?", "Who is the spouse of {S}?"],
    ),
    "instrument": (
        "instrument",
        ["{Sc} plays the {A}.", "The instrument of {S} is the {A}."],
        ["What instrument does {S} play?", "Which instrument does {S} play?"],
    ),
    "mentor": (
        "person",
        ["{Sc} was trained by {A}.", "The mentor of {S} was {A}."],
        ["Who trained {S}?", "Who was the mentor of {S}?"],
    ),
    "pet": (
        "word",
        ["{Sc} has a dog called {A}.", "The cat of {S} is named {A}."],
        ["What is the name of the pet of {S}?", "What is the pet of {S} called?"],
    ),
    "maker": (
        "org",
        ["{Sc} is made by {A}.", "{A} makes {S}.", "The maker of {S} is {A}."],
        ["Who makes {S}?", "Who is the maker of {S}?", "Which company makes {S}?"],
    ),
    "released": (
        "year",
        ["{Sc} was released in {A}.", "{Sc} came out in {A}."],
        ["When was {S} released?", "In which year did {S} come out?"],
    ),
    "inventor": (
        "person",
        ["{Sc} was invented by {A}.", "{A} invented {S}."],
        ["Who invented {S}?", "Who is the inventor of {S}?"],
    ),
}
JOBS = [
    "baker",
    "pilot",
    "nurse",
    "carpenter",
    "teacher",
    "chemist",
    "lawyer",
    "sailor",
    "gardener",
    "engineer",
    "librarian",
    "painter",
    "surgeon",
    "miner",
    "tailor",
    "geologist",
]
INSTRUMENTS = ["violin", "cello", "harp", "trumpet", "oboe", "flute", "piano", "drums", "accordion", "banjo"]
# free-form rewrites of a question (applied on top of any wording; training only)
FREEFORM = [
    "Can you tell me {q}",
    "Do you know {q}",
    "I want to know {q}",
    "Please tell me {q}",
    "Question: {q}",
    "{Q} Answer briefly.",
    "{Q} Just the answer, please.",
    "{Q} Use the documents.",
    "Quick question: {Q}",
    "According to the documents, {q}",
    "Based on the context, {q}",
    "{Q} Reply with the exact words.",
]


#: Share of look-alike made-up words in the broad family (``train_qa_model.py --lookalike``; 0: none).
LOOKALIKE = 0.0

#: Open vocabulary in the broad family (``train_qa_model.py --open``; 0: none). This share of the
#: answers that would come from a closed list (materials, colours, languages, jobs, instruments)
#: is made up instead ("velk planks", "tarsine"), so such answers are copied, not recalled; a
#: third of it of the made-up words are pieces of the tokenizer's own vocabulary (every token's
#: copy is trained, not only the syllables'); a fifth of it of the words carry a letter with an
#: accent ("Valdés") and of the people a double-barrelled last name ("Osei-Mensah").
OPEN = 0.0
_ACCENTS = {"a": "áàâä", "e": "éèêë", "i": "íî", "o": "óôöø", "u": "úüû", "n": "ñ", "c": "ç"}
_PIECES: list[str] = []


def _vocab_pieces() -> list[str]:
    """The embedded tokenizer's letter-only tokens of 2+ letters without a leading space."""
    if not _PIECES:
        import json
        from pathlib import Path

        tok = Path(__file__).resolve().parents[1] / "core" / "models" / "tiny-qa-llama" / "tokenizer.json"
        vocab = json.loads(tok.read_text(encoding="utf-8"))["model"]["vocab"]
        _PIECES.extend(sorted({t.lower() for t in vocab if len(t) >= 2 and t.isascii() and t.isalpha()}))
    return _PIECES


class BroadNames(Names):
    """Names of every shape: 1-4 words, syllabic or letter salad, real-looking people, titles.

    ``LOOKALIKE`` (when set) of the made-up words share a start or an end with a word made earlier in the
    same conversation ("Cindergate" beside "Cinderness", "Holloway" beside "Brackloway"): the
    subjects and answers of distractor documents then differ from the asked one only in part
    of a name, so picking the right fact needs the whole name matched, not its first token."""

    def __init__(self, rng: random.Random, split: str) -> None:
        super().__init__(rng, split)
        self.made: list[str] = []

    def word(self, lo: int = 2, hi: int = 3) -> str:
        r = self.rng
        if LOOKALIKE and self.made and r.random() < LOOKALIKE:  # 0: the same draws as without
            base = r.choice(self.made).lower()
            for _ in range(20):
                fresh = self._raw(1, 2)
                same_start = r.random() < 0.5  # else: other start, same end
                k = r.randint(2, max(2, len(base) - 2))
                w = base[:k] + fresh if same_start else fresh + base[-k:]
                if 3 <= len(w) <= 14 and w != base and is_heldout_name(w) == self.heldout:
                    w = w.capitalize()
                    self.made.append(w)
                    return w
        if OPEN and r.random() < OPEN / 3:
            w = self._salad()
        else:
            w = super().word(lo, hi)
        if OPEN and r.random() < OPEN / 5:
            w = self._accented(w)
        self.made.append(w)
        return w

    def _salad(self) -> str:
        """A word of 1-3 random pieces of the tokenizer's vocabulary, on this name split's side."""
        r = self.rng
        for _ in range(50):
            w = "".join(r.choice(_vocab_pieces()) for _ in range(r.randint(1, 3)))
            if 3 <= len(w) <= 14 and is_heldout_name(w) == self.heldout:
                return w.capitalize()
        return super().word()

    def _accented(self, w: str) -> str:
        spots = [i for i, ch in enumerate(w) if ch.lower() in _ACCENTS]
        if not spots:
            return w
        i = self.rng.choice(spots)
        ch = self.rng.choice(_ACCENTS[w[i].lower()])
        return w[:i] + (ch.upper() if w[i].isupper() else ch) + w[i + 1 :]

    def open_value(self, kind: str) -> str:
        """A made-up value where a closed list would give one (see ``OPEN``)."""
        r = self.rng
        w = self.word(1, 3)
        if kind == "language":
            return w
        w = w.lower()
        x = r.random()
        if x < 0.25:
            return f"{w} {self.word(1, 2).lower()}"
        if x < 0.35:
            return f"{w} and {self.word(1, 2).lower()}"
        return w

    def person(self) -> str:
        r = self.rng
        x = r.random()
        if x < 0.35:
            first = self.word(1, 2) if r.random() < 0.5 else self._pick(REAL_FIRST)
            last = self.word(2, 3) if r.random() < 0.6 else self._pick(REAL_LAST)
            name = f"{first} {last}"
        elif x < 0.6:
            name = super().person()
        elif x < 0.72:
            name = f"{self.word(1, 2)} {self.rng.choice('ABCDEFGHJKLMNPRSTVW')}. {self.word(2, 3)}"
        elif x < 0.82:
            name = f"{self.word(1, 2)} {self.word(1, 2)} {self.word(2, 3)}"
        elif x < 0.9:
            name = f"{self.word(1, 2)} {r.choice(['van', 'de', 'von', 'da', 'al'])} {self.word(2, 3)}"
        else:
            name = self.word(2, 3)
        if OPEN and r.random() < OPEN / 5 and " " in name:
            name = f"{name}-{self.word(2, 3)}"
        if r.random() < 0.15 and not name.startswith("Dr."):
            name = f"{r.choice(TITLES)} {name}"
        return name

    def _pick(self, pool: list[str]) -> str:
        """A real-looking name: only its held-out or training side (same split as made-up words)."""
        for _ in range(30):
            w = self.rng.choice(pool)
            if is_heldout_name(w) == self.heldout:
                return w
        return self.word(1, 2)

    def code(self) -> str:
        r = self.rng
        letters = "".join(r.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(r.randint(1, 3)))
        return f"{letters}-{r.randint(1, 999)}" if r.random() < 0.7 else f"{self.word(1, 2)} {r.randint(2, 99)}"

    def multi(self) -> str:
        return " ".join(self.word(1, 3) for _ in range(self.rng.choice([1, 1, 1, 2, 2, 3])))


def _broad_answer(kind: str, names: BroadNames) -> str:
    r = names.rng
    if OPEN and kind in ("colour", "material", "language", "job", "instrument") and r.random() < OPEN:
        return names.open_value(kind)
    if kind.startswith("measure:"):
        unit_key = kind.split(":", 1)[1]
        units = UNITS.get(unit_key, UNITS["height"]) if unit_key != "height_p" else ["cm", "meters", "m"]
        if unit_key == "height_p":
            v = r.choice([str(r.randint(150, 205)), f"1.{r.randint(50, 99)}"])
            return f"{v} {'cm' if '.' not in v else r.choice(['meters', 'm'])}"
        v = r.choice(
            [
                str(r.randint(2, 999)),
                f"{r.randint(1, 99)}.{r.randint(0, 9)}",
                f"{r.randint(1, 99)},{r.randint(100, 999)}",
            ]
        )
        return f"{v} {r.choice(units)}"
    if kind == "count":
        n = r.choice([r.randint(2, 99), r.randint(100, 999), r.randint(1000, 999_999)])
        return f"{n:,}" if n >= 1000 and r.random() < 0.5 else str(n)
    if kind == "year":
        return str(r.randint(1500, 2030))
    if kind == "date":
        months = [
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
        d, m, y = r.randint(1, 28), r.choice(months), r.randint(1800, 2030)
        return f"{m} {d}, {y}" if r.random() < 0.5 else f"{d} {m} {y}"
    if kind == "person":
        return names.person()
    if kind == "place":
        return names.place() if r.random() < 0.7 else names.multi()
    if kind == "colour":
        c = r.choice(COLORS)
        return c if r.random() < 0.7 else f"{c} and {r.choice(COLORS)}"
    if kind == "material":
        return r.choice(MATERIALS)
    if kind == "language":
        return r.choice(LANGUAGES) if r.random() < 0.5 else names.word(2, 3) + "ish"
    if kind == "title":
        return names.multi() if r.random() < 0.6 else f"{names.word(1, 2)} of {names.word(2, 3)}"
    if kind == "word_river":
        return names.word(2, 3)
    if kind == "job":
        return r.choice(JOBS)
    if kind == "instrument":
        return r.choice(INSTRUMENTS)
    if kind == "org":
        return (
            names.entity() if r.random() < 0.6 else f"{names.multi()} {r.choice(['Ltd', 'Inc.', 'Group', 'and Sons'])}"
        )
    return names.multi()


def _broad_subject(kind: str, names: BroadNames) -> str:
    r = names.rng
    pat = r.choice(BROAD_KINDS[kind][0])
    return pat.format(N=names.multi(), W=names.word(2, 3), C=names.code(), P=names.person())


def make_broad_doc(names: BroadNames, used: set[str], kind: str | None = None) -> Doc:
    """One document about one subject of a broad kind, 1-10 facts in varied phrasings."""
    r = names.rng
    kind = kind or r.choice(list(BROAD_KINDS))
    for _ in range(50):
        subj = _broad_subject(kind, names)
        if subj not in used and subj.lower() not in {u.lower() for u in used}:
            break
    used.add(subj)
    rels = BROAD_KINDS[kind][1]
    n = min(len(rels), r.choice([1, 2, 3, 3, 4, 4, 5, 6, 7, 8, 9, 10]))
    chosen = r.sample(rels, n)
    sentences: list[str] = []
    facts: list[Fact] = []
    kinds_seen: set[str] = set()
    for rel in chosen:
        akind, forms, _ = BROAD_RELS[rel]
        # one answer of a kind per document when the kind alone would decide it ("the year")
        if akind in ("year", "date") and akind in kinds_seen:
            continue
        kinds_seen.add(akind)
        for _ in range(20):
            ans = _broad_answer(akind, names)
            if ans not in used:
                break
        else:
            continue
        used.add(ans)
        sentences.append(r.choice(forms).format(S="{S}", Sc="{Sc}", A=ans))
        facts.append(Fact("broad:" + rel, subj, ans))
    if not facts:
        return make_broad_doc(names, used, kind)
    if r.random() < 0.15:
        sentences.insert(r.randint(0, len(sentences)), r.choice(BROAD_FILLERS))
    sentences = fuse(sentences, r)
    text = " ".join(x.format(S=subj, Sc=_cap(subj)) for x in sentences)
    title = _cap(subj[4:] if subj.startswith("the ") else subj)
    return Doc(title=title, text=text, facts=facts, slug=title.lower().replace(" ", "_"))


BROAD_FILLERS = [
    "{Sc} is popular with visitors.",
    "Many people have written about {S}.",
    "{Sc} appears in several old maps.",
    "Little else is known about {S}.",
    "{Sc} is often confused with its neighbours.",
    "{Sc} was in the news last year.",
]


def fuse(sentences: list[str], r: random.Random) -> list[str]:
    """Join some neighbouring sentences about the subject into one, the way prose does: "{Sc} X
    and Y.", "{Sc}, which X, Y.", "<participle> ..., {S} Y." (X, Y: verb phrases of two facts)."""
    out: list[str] = []
    i = 0
    while i < len(sentences):
        a = sentences[i]
        b = sentences[i + 1] if i + 1 < len(sentences) else None
        if b and a.startswith("{Sc} ") and b.startswith("{Sc} ") and r.random() < 0.35:
            # one full stop off: an answer may end with its own ("Waha Inc.")
            va, vb = a[5:].removesuffix("."), b[5:].removesuffix(".")
            m = r.random()
            words = va.split(" ")
            if m < 0.4:
                out.append(f"{{Sc}} {va} and {vb}.")
            elif m < 0.75 or len(words) < 2:
                out.append(f"{{Sc}}, which {va}, {vb}.")
            elif words[0] in ("is", "was") and words[1].endswith(("ed", "en", "lt", "wn")):
                out.append(f"{_cap(' '.join(words[1:]))}, {{S}} {vb}.")
            else:
                out.append(f"{{Sc}} {va}; it {vb}.")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def broad_question(fact: Fact, rng: random.Random) -> str:
    _, _, qs = BROAD_RELS[fact.rel.split(":", 1)[1]]
    return _freeform(rng.choice(qs).format(S=fact.subject, Sc=_cap(fact.subject)), rng)


REPHRASE = [
    # (pattern, rewrites): the question's own words, put another way
    (
        r"^What is the (.+) of (.+)\?$",
        [
            "Tell me the {0} of {1}.",
            "Give me the {0} of {1}.",
            "What's the {0} of {1}?",
            "The {0} of {1} is what?",
            "{1C}: what is its {0}?",
            "I need the {0} of {1}.",
            "Do you know the {0} of {1}?",
            "Which {0} does {1} have?",
        ],
    ),
    (
        r"^Who (.+)\?$",
        [
            "Tell me who {0}.",
            "Which person {0}?",
            "Name the person who {0}.",
            "Do you know who {0}?",
            "Who exactly {0}?",
        ],
    ),
    (r"^How many (.+)\?$", ["Tell me how many {0}.", "How many {0}, exactly?", "Do you know how many {0}?"]),
    (
        r"^When was (.+) (\w+)\?$",
        [
            "In which year was {0} {1}?",
            "What year was {0} {1}?",
            "Tell me when {0} was {1}.",
            "{0C} was {1} when?",
            "When exactly was {0} {1}?",
        ],
    ),
    (
        r"^Where (is|was|does|did) (.+)\?$",
        ["Tell me where {0} {1}.", "Do you know where {0} {1}?", "In which place {0} {1}?"],
    ),
    (
        r"^How (tall|long|deep|heavy|high|old|fast|large|big) is (.+)\?$",
        ["Tell me how {0} {1} is.", "How {0} is {1}, exactly?", "{1C}: how {0} is it?", "Do you know how {0} {1} is?"],
    ),
]


def _rephrase(q: str, rng: random.Random) -> str:
    import re

    for pat, outs in REPHRASE:
        m = re.match(pat, q)
        if m:
            g = list(m.groups())
            kw = {f"{i}C": _cap(x) for i, x in enumerate(g)}
            return rng.choice(outs).format(*g, **kw)
    return q


def _freeform(q: str, rng: random.Random) -> str:
    if rng.random() < 0.3:
        q = _rephrase(q, rng)
    x = rng.random()
    if x < 0.25:
        low = q[0].lower() + q[1:]
        return rng.choice(FREEFORM).format(q=low, Q=q)
    if x < 0.3:
        return q.rstrip("?")
    if x < 0.35:
        return q.lower()
    return q


# ----------------------------------------------------------------------------- prompts
LI_SYSTEM = (
    "You are an expert Q&A system that is trusted around the world.\n"
    "Always answer the query using the provided context information, and not prior knowledge.\n"
    "Some rules to follow:\n"
    "1. Never directly reference the given context in your answer.\n"
    "2. Avoid statements like 'Based on the context, ...' or 'The context information ...' or anything along those lines."
)
LI_QA = (
    "Context information is below.\n---------------------\n{context_str}\n---------------------\n"
    "Given the context information and not prior knowledge, answer the query.\nQuery: {query_str}\nAnswer: "
)
LI_REFINE = (
    "You are an expert Q&A system that strictly operates in two modes when refining existing answers:\n"
    "1. **Rewrite** an original answer using the new context.\n"
    "2. **Repeat** the original answer if the new context isn't useful.\n"
    "Never reference the original answer or context directly in your answer.\n"
    "When in doubt, just repeat the original answer.\n"
    "New Context: {context_msg}\nQuery: {query_str}\nOriginal Answer: {existing_answer}\nNew Answer: "
)
LC_TUTORIAL_SYSTEM = (
    "You are an assistant for question-answering tasks. Use the following pieces of retrieved context to "
    "answer the question. If you don't know the answer, just say that you don't know. Use three sentences "
    "maximum and keep the answer concise.\n\n{context}"
)
LC_RLM = (
    "You are an assistant for question-answering tasks. Use the following pieces of retrieved context to "
    "answer the question. If you don't know the answer, just say that you don't know. Use three sentences "
    "maximum and keep the answer concise.\nQuestion: {question} \nContext: {context} \nAnswer:"
)
LC_SYSTEMS = [
    "Answer the question using only the context below. If the answer is not in the context, say you don't know.",
    "Answer the question using only the provided context.",
    "Use only the context to answer the question. Keep the answer short.",
    "You are a helpful assistant. Answer using only the context.",
    "Answer the user's question based only on the following context.",
]
SHAPES = [
    "li_chat",
    "li_chat",
    "li_text",
    "li_refine",
    "lc_system",
    "lc_system",
    "lc_tutorial",
    "lc_rlm",
    "plain_ctx_first",
    "plain_q_first",
    "plain_numbered",
    "lc_system_ctx",
]
# the broad data adds plain "Context/Question/Answer" layouts (markdown headings, bullets)
SHAPES_BROAD = SHAPES + ["lc_system", "li_chat", "plain_cqa", "plain_cqa", "plain_markdown"]


def format_context(docs: list[Doc], shape: str, rng: random.Random) -> str:
    if shape.startswith("li_"):
        parts = []
        meta = rng.random() < 0.6
        root = rng.choice(["/home/user/docs", "/data/notes", "C:\\Users\\me\\docs", "./docs", "/tmp/rag"])
        for d in docs:
            if meta:
                sep = "\\" if "\\" in root else "/"
                parts.append(f"file_path: {root}{sep}{d.slug}.txt\n\n{d.text}")
            else:
                parts.append(d.text)
        return "\n\n".join(parts)
    if shape == "plain_markdown" and rng.random() < 0.5:
        return "\n".join(f"- {d.text}" for d in docs)
    if shape == "plain_numbered":
        style = rng.randint(0, 2)
        if style == 0:
            return "\n\n".join(f"Document {i + 1}: {d.text}" for i, d in enumerate(docs))
        if style == 1:
            return "\n".join(f"[{i + 1}] {d.text}" for i, d in enumerate(docs))
        return "\n\n".join(f"{d.title}\n{d.text}" for d in docs)
    return ("\n\n" if rng.random() < 0.8 else "\n").join(d.text for d in docs)


def render_messages(
    shape: str, context: str, question: str, rng: random.Random, docs: list[Doc], target: Fact | None = None
) -> list[tuple[str, str]]:
    """(role, content) pairs of the first turn."""
    if shape == "li_chat":
        return [("system", LI_SYSTEM), ("user", LI_QA.format(context_str=context, query_str=question))]
    if shape == "li_text":
        return [("user", LI_QA.format(context_str=context, query_str=question))]
    if shape == "li_refine":
        existing = (
            target.answer
            if (target is not None and rng.random() < 0.5)
            else rng.choice(["I don't know.", "Empty Response", "The context does not say."])
        )
        return [("user", LI_REFINE.format(context_msg=context, query_str=question, existing_answer=existing))]
    if shape == "lc_system":
        return [("system", rng.choice(LC_SYSTEMS)), ("user", f"Context: {context}\n\nQuestion: {question}")]
    if shape == "lc_system_ctx":
        return [("system", rng.choice(LC_SYSTEMS) + "\n\nContext:\n" + context), ("user", question)]
    if shape == "lc_tutorial":
        return [("system", LC_TUTORIAL_SYSTEM.format(context=context)), ("user", question)]
    if shape == "lc_rlm":
        return [("user", LC_RLM.format(question=question, context=context))]
    if shape == "plain_q_first":
        return [("user", f"Question: {question}\n\nContext:\n{context}")]
    if shape == "plain_numbered":
        return [("user", f"{context}\n\nQuestion: {question}")]
    if shape == "plain_cqa":
        msgs = [
            (
                "user",
                rng.choice(["", "Answer from the context.\n\n"])
                + f"Context:\n{context}\n\nQuestion: {question}\nAnswer:",
            )
        ]
        return ([("system", rng.choice(LC_SYSTEMS))] + msgs) if rng.random() < 0.4 else msgs
    if shape == "plain_markdown":
        return [("user", f"### Context\n{context}\n\n### Question\n{question}\n\n### Answer")]
    # plain_ctx_first
    lead = rng.choice(["", "Read the documents and answer.\n\n", "Documents:\n"])
    tail = rng.choice(["\n\n{q}", "\n\nQuestion: {q}", "\n\nQ: {q}\nA:", "\n\n{q} Answer with the exact words."])
    return [("user", lead + context + tail.format(q=question))]


def question_for(fact: Fact, wording: str, rng: random.Random) -> str:
    rel = REL[fact.rel]
    pool = rel.train_q if wording == "train" else rel.reworded_q
    q = rng.choice(pool).format(S=fact.subject, Sc=_cap(fact.subject))
    if wording == "train" and rng.random() < 0.05:
        q = q.lower()
    return q


def random_date(rng: random.Random) -> str:
    return f"{rng.randint(1, 28):02d} {rng.choice(MONTHS)} {rng.randint(2023, 2031)}"


@dataclass
class Example:
    messages: list[tuple[str, str]]  # full conversation before the final answer
    answers: list[str]  # assistant answers, one per user question (the last one is generated)
    date_string: str
    n_docs: int
    shape: str
    turns: list[tuple[int, int]] = field(default_factory=list)  # unused helper


def make_qa(
    rng: random.Random,
    n_docs: int,
    *,
    split: str = "train",
    wording: str = "train",
    shape: str | None = None,
    followups: int = 0,
    broad: float = 0.0,
) -> tuple[list[tuple[str, str]], list[str], list[Doc]]:
    """A conversation: messages with the assistant answers interleaved, the answers and the docs.

    The returned message list ends with the last user turn (its answer is ``answers[-1]``);
    earlier answers already appear as assistant turns. ``broad`` is the share of documents from
    the broad family (``make_broad_doc``), with names of every shape and free-form questions;
    ``broad=0`` gives exactly the original lab/thing data (the held-out evaluation cells).
    """
    if broad > 0:
        names: Names = BroadNames(rng, split)
        theme = rng.choice(list(BROAD_KINDS))
    else:
        names = Names(rng, split)
    used: set[str] = set()
    docs = []
    for _ in range(n_docs):
        if broad > 0 and rng.random() < broad:
            docs.append(make_broad_doc(names, used, theme if rng.random() < 0.5 else None))  # type: ignore[arg-type]
        else:
            docs.append(make_doc(names, used))
    all_facts = [(i, f) for i, d in enumerate(docs) for f in d.facts]
    shape = shape or rng.choice(SHAPES_BROAD if broad > 0 else SHAPES)
    context = format_context(docs, shape, rng)
    picks = rng.sample(all_facts, min(len(all_facts), 1 + followups))

    def ask(f: Fact) -> str:
        if f.rel.startswith("broad:"):
            return broad_question(f, rng)
        q = question_for(f, wording, rng)
        return _freeform(q, rng) if broad > 0 else q

    first = picks[0][1]
    msgs = render_messages(shape, context, ask(first), rng, docs, first)
    answers = [first.answer]
    for _, f in picks[1:]:
        msgs.append(("assistant", answers[-1]))
        q = ask(f)
        if rng.random() < 0.2:
            q = rng.choice(["And ", "Also, ", "One more: "]) + q[0].lower() + q[1:]
        msgs.append(("user", q))
        answers.append(f.answer)
    return msgs, answers, docs


def make_copy(rng: random.Random, split: str = "train") -> tuple[list[tuple[str, str]], list[str]]:
    """Copy-task warm-up: repeat a made-up text word for word."""
    names = Names(rng, split)
    used: set[str] = set()
    if rng.random() < 0.5:
        text = make_doc(names, used).text
        words = text.split(" ")
        if len(words) > 6:
            a = rng.randint(0, len(words) - 3)
            text = " ".join(words[a : a + rng.randint(2, 12)])
    else:
        text = " ".join(
            rng.choice([names.word(), names.person(), names.chip(), names.place(), str(rng.randint(1, 9999))])
            for _ in range(rng.randint(1, 5))
        )
    ask = rng.choice(
        [
            "Repeat this text word for word: {t}",
            "Copy exactly: {t}",
            "Say exactly this: {t}",
            "Repeat after me.\n{t}",
            "Text: {t}\n\nRepeat the text.",
        ]
    ).format(t=text)
    msgs = [("user", ask)]
    if rng.random() < 0.3:
        msgs.insert(0, ("system", rng.choice(LC_SYSTEMS)))
    return msgs, [text]
