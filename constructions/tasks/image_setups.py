"""The paper's text-to-image setups as data: prompts, per-slot labels, seeds and splits by prompt.

Rebuilt from the anchor's image code (Florian-toll/compgen-vision, which the official repository's
README points to), read, not run:

- `compositional_gen/config.py: COMPONENT_CONFIGS`: the 31 setups, their word lists, templates
  and the question each one puts to the judge (its `prompt_template`). They are copied here as
  data, with the anchor's spelling, also where it is odd (see "Odd data" below): the point is to
  ask what the paper asked.
- `compositional_gen/data.py`: how prompts, labels and splits are made.
  - `slots` setups (`create_cross_component_dataset`): a template such as "{animal} wearing
    {clothing}" filled with every combination of one word per slot, in `itertools.product` order
    over the slots as listed. The label is one one-hot vector per slot, concatenated in slot
    order. One grammar patch: with a slot `number` equal to "one", the slot `object` is made
    singular (a small table, else a trailing "s" dropped).
  - `pick` setups (`create_all_combinations_dataset`, hotness 3, the default of
    `AnalysisConfig` and of `run_experiment.py --max-hotness`): every 3-subset of the items, in
    `itertools.combinations` order, rendered "An image with one X, one Y, one Z". The label is the
    3-hot vector over the items, one presence bit per item. (The anchor's `--variable-hotness`,
    1..3-hot, is not rebuilt.)
  - Split: `train_test_split(test_size=0.3, random_state=42)` over the prompts, i.e. sklearn's
    ShuffleSplit: ceil(0.3·n) prompts held out, the first of `RandomState(42).permutation(n)`.
    `draw_test` follows that rule, so the default split should be the anchor's own, as read
    (sklearn is not installed here to run it).
- `compositional_gen/analysis.py: generate_images`: prompt i's k-th image uses the seed
  base + i·n_seeds + k, base 42 (`seeds`). Seeds are per prompt and the split is by prompt, so
  every seed of a prompt lies on its prompt's side; `PromptSplit.seed_rows` spells it out.
- `llm_eval.py`: the judge's structured answer has one field per slot, described
  "{slot} - choose ONE of: {words}" (`slots`), or one boolean per item, "Whether {item} is in the
  image" (`pick`); these are the per-slot `questions`. An image succeeds when every field is right.

This project's own addition is the task-support idea of `splits.py`: a split reports whether
every constituent (every label bit: a word in a slot, or an item) occurs in at least one training
prompt, and which do not. A held-out prompt with an untrained constituent tests more than
composition.

Odd data, kept as the anchor has it (the counts and labels do not depend on it):

- Articles twice, in the template and in the words: `nested_containment_animals` renders "A A
  lion containing a a lion containing an a lion", `animals_with_food_eyes_and_clothes` "A A cat
  with strawberries as eyes ..." (all 2,000 prompts of the two). Articles that do not agree:
  "A apple is dancing", "A elephant in pixel art", "sitting on a clouds", and the word "a eagle"
  (the last slot of `nested_containment_animals`, `three_animals_three_materials`, `..._verbs`).
- `three_animals_three_adjectives` renders "A sad {animal_happy}, a happy {animal_sad}, ...":
  the prompt calls the animal of the slot `animal_happy` sad, while the judge is asked which
  animal is happy.
- `animals_with_adjectives` renders "A image of  a {adjective} {animal}" (two spaces).
- `counting_objects`' singular patch gives "exactly one cherrie", "one strawberrie", "one
  peache"; `counting_animals` has no slot `object`, so it says "exactly one lions".
- The three-animal setups allow the same animal in every slot ("A lion made of fire, a lion
  made of ice, and a lion made of wood"), while their judge prompts say each animal appears once.
- Judge prompts whose options differ from the words: `animals_with_descriptor` offers
  "middle-aged" where the words have "three-legged"; the clothing slots offer "sunglasses",
  "pants", "boots" for "a pair of ..."; `stacked_foods`' top slot has "Sushi", "Ice cream",
  "Spaghetti" capitalised. The anchor matches answers to words after dropping a leading article
  (case-sensitive) and every "one " (`llm_eval.latent_from_schema`), which also turns "stone bowl"
  (`nested_containment`) into "stbowl", a word no answer can match.
- `animals_short` picks 3 of only 4 items (4 prompts; ceil(0.3·4) = 2 of them held out).

Usage:

    setup = SETUPS["animals_with_clothes"]
    prompts(setup)[:2]  # ['A cat wearing a hat', 'A cat wearing a pair of sunglasses']
    labels(setup).shape  # (100, 20)
    s = split(setup)  # 70 train / 30 test prompts; s.covers_all_constituents, s.missing_constituents
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

KINDS = ("slots", "pick")
PICK = 3  # items per pick prompt: the anchor's default hotness
ANCHOR_SEED = 42  # the anchor's random_state for the split and its base seed for the images


@dataclass(frozen=True)
class ImageSetup:
    """One prompt family.

    `slots` setups fill `template` (a str.format template over `slots`) with one word of each
    slot's list in `words`. `pick` setups have one slot, "items", whose word list is the items, and
    `template` "An image with {items}". `questions` holds the judge's question per slot (`slots`)
    or per item (`pick`), `judge_prompt` the whole prompt the anchor sends with the image.
    """

    name: str
    kind: str
    template: str
    slots: tuple[str, ...]
    words: tuple[tuple[str, ...], ...]
    questions: tuple[str, ...]
    judge_prompt: str
    k: int = PICK

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {self.kind!r}")
        if len(self.slots) != len(self.words) or any(len(w) == 0 for w in self.words):
            raise ValueError(f"{self.name}: every slot needs a non-empty word list")
        if self.kind == "pick" and not (len(self.slots) == 1 and 1 <= self.k <= len(self.words[0])):
            raise ValueError(f"{self.name}: a pick setup has one item list and picks 1..{len(self.words[0])}")

    @property
    def n_prompts(self) -> int:
        if self.kind == "pick":
            return math.comb(len(self.words[0]), self.k)
        return math.prod(len(w) for w in self.words)

    @property
    def constituents(self) -> tuple[str, ...]:
        """The label bits' names, in label order: "slot=word", or the item itself for `pick`."""
        if self.kind == "pick":
            return self.words[0]
        pairs = zip(self.slots, self.words, strict=True)
        return tuple(f"{slot}={word}" for slot, words in pairs for word in words)


def _w(text: str) -> tuple[str, ...]:
    """A word list written "a|b|c" (compact for the long tables below)."""
    return tuple(text.split("|"))


def _slots(name: str, template: str, **words: tuple[str, ...]) -> ImageSetup:
    questions = tuple(f"{slot} - choose ONE of: {', '.join(ws)}" for slot, ws in words.items())
    return ImageSetup(name, "slots", template, tuple(words), tuple(words.values()), questions, _JUDGE[name])


def _in_order(name: str, template: str, *words: tuple[str, ...]) -> ImageSetup:
    """A slots setup whose slots are the template's fields, in the order they stand, filled
    with `words` (one list a slot)."""
    fields = [f for _, f, _, _ in string.Formatter().parse(template) if f]
    return _slots(name, template, **dict(zip(fields, words, strict=True)))


def _pick(name: str, items: tuple[str, ...]) -> ImageSetup:
    questions = tuple(f"Whether {item} is in the image" for item in items)
    return ImageSetup(name, "pick", "An image with {items}", ("items",), (items,), questions, _JUDGE[name])


# Word lists that several setups share (the anchor repeats them literally).
_ZOO = _w("lion|elephant|giraffe|crocodile|bear|snake|eagle|cow|zebra|tiger")
_ZOO_CAP = _w("A lion|An elephant|A giraffe|A crocodile|A bear|A snake|An eagle|A cow|A zebra|A tiger")
_ZOO_LOWER = _w("a lion|an elephant|a giraffe|a crocodile|a bear|a snake|an eagle|a cow|a zebra|a tiger")
_ZOO_LOWER_A_EAGLE = _w("a lion|an elephant|a giraffe|a crocodile|a bear|a snake|a eagle|a cow|a zebra|"
                        "a tiger")
_PETS_CAP = _w("A cat|A dog|A bear|A lion|An elephant|A giraffe|A monkey|A zebra|A tiger|A panda")
_FOODS_LOWER = _w("a burger|a pizza|a salad|sushi|a taco|a donut|ice cream|a pancake|spaghetti|a sandwich")

# The judge's prompt per setup: config.py's prompt_template, verbatim.
_JUDGE = {
    "animals_short": (
        "Looking at this image, identify which animal(s) are present. Analyze and return a boolean value "
        "(true/false) for each of these specific animals: giraffe, lion, elephant, and crocodile. Return "
        "your answer in JSON format where each animal is a boolean property."
    ),
    "animals": (
        "Look at this image and identify which animals are present. For each animal in this list (giraffe, "
        "lion, elephant, crocodile, bear, snake, eagle, cow), indicate with a boolean value (true/false) "
        "whether it appears in the image. Return your analysis as a JSON object with each animal as a "
        "property."
    ),
    "animals_long": (
        "Analyze this image and identify which animals are present from the following comprehensive list: "
        "giraffe, lion, elephant, crocodile, bear, snake, eagle, cow, zebra, tiger, rhino, hippo, wolf, "
        "fox, deer, monkey, panda, koala, kangaroo, and penguin. For each animal, return a boolean value "
        "(true if present, false if not) in your JSON response."
    ),
    "objects": (
        "Examine this image and identify which geometric objects are present. For each of these specific "
        "objects (red cube, blue sphere, green cylinder, yellow cone, purple pyramid, orange triangular "
        "prism, black cuboid, brown triangular prism), indicate with a boolean value (true/false) whether "
        "it appears in the image. Return your analysis as a JSON object with each object as a property."
    ),
    "objects_two_colours": (
        "Carefully examine this image and identify which colored geometric objects are present. For each "
        "specific color-shape combination (red cube, green cube, blue sphere, orange sphere, green "
        "cylinder, purple cylinder, yellow cone, blue cone, purple pyramid, red pyramid, orange cuboid, "
        "yellow cuboid), indicate with a boolean value (true/false) whether it appears in the image. Pay "
        "close attention to both the shape AND color of each object. Return your analysis as a JSON object "
        "with each colored shape as a property."
    ),
    "objects_three_colours": (
        "Analyze this image and identify which colored 3D geometric shapes are present. The image may "
        "contain various shapes (cubes, spheres, cylinders, cones, pyramids, cuboids) in different colors "
        "(red, green, blue, yellow, orange, purple). For each specific color-shape combination listed in "
        "the schema, indicate with a boolean value (true/false) whether it appears in the image. Be "
        "precise about both the exact shape AND its color. Return your analysis as a structured JSON "
        "object."
    ),
    "fruits_veggies_long": (
        "Examine this image and identify which fruits and vegetables are present. For each item in this "
        "list (apple, banana, orange, grape, strawberry, watermelon, pineapple, mango, blueberry, peach, "
        "lemon, cherry, carrot, broccoli, tomato, cucumber, potato, onion, pepper, lettuce), indicate with "
        "a boolean value (true/false) whether it appears in the image. Return your analysis as a JSON "
        "object with each fruit or vegetable as a property."
    ),
    "animals_with_clothes": (
        "This image shows an animal wearing an item of clothing. Identify both: \n"
        "1. Which animal is shown (choose one from: cat, dog, bear, lion, elephant, giraffe, monkey, "
        "zebra, tiger, panda)\n"
        "2. What clothing item the animal is wearing (choose one from: hat, sunglasses, scarf, bowtie, "
        "jacket, crown, tie, cape, sweater, necklace)\n"
        "Return your answer as a JSON object with 'animal' and 'clothing' properties, using exactly one of "
        "the provided options for each."
    ),
    "animals_with_clothes_and_food": (
        "This image shows an animal wearing clothing and eating food. Identify all three elements:\n"
        "1. Which animal is shown (choose one from: cat, dog, bear, lion, elephant, giraffe, monkey, "
        "zebra, tiger, panda)\n"
        "2. What clothing item the animal is wearing (choose one from: hat, sunglasses, scarf, bowtie, "
        "jacket, crown, tie, cape, pants, boots)\n"
        "3. What food the animal is eating (choose one from: pizza, banana, ice cream, cake, hamburger, "
        "apple, watermelon, donut, sandwich, salad)\n"
        "Return your answer as a JSON object with 'animal', 'clothing', and 'food' properties, using "
        "exactly one of the provided options for each category."
    ),
    "animals_with_food_eyes_and_clothes": (
        "This image shows a surreal scene with an animal that has food items as eyes and is wearing "
        "clothing. Identify the following three elements:\n"
        "1. Which animal is shown (choose one from: cat, bear, lion, elephant, giraffe, monkey, zebra, "
        "panda, wolf, rabbit)\n"
        "2. What food items are used as the animal's eyes (choose one from: strawberries, oranges, "
        "burgers, watermelons, donuts, cookies, cupcakes, pizza, lemons, tomatoes)\n"
        "3. What clothing item the animal is wearing (choose one from: crown, cowboy hat, scarf, cape, "
        "hawaiian shirt, leather jacket, pants, tuxedo, raincoat, sunglasses)\n"
        "Return your answer as a JSON object with 'animal', 'food', and 'clothing' properties, using "
        "exactly one of the provided options for each category."
    ),
    "counting_objects": (
        "This image shows multiple instances of a single type of object. Your task is to:\n"
        "1. Identify what type of object is shown (select from: tomatoes, onions, oranges, wolves, bears, "
        "apples, bananas, carrots, cucumbers, strawberries, lemons, cherries, grapes, peaches, pears, "
        "foxes, rabbits, cats, dogs, sheep)\n"
        "2. Count EXACTLY how many of these objects are present in the image (select from: one, two, "
        "three, four, five, six, seven, eight, nine, ten, eleven, twelve, thirteen, fourteen, fifteen, "
        "sixteen, seventeen, eighteen, nineteen, twenty)\n"
        "Return your answer as a JSON object with the 'number' and 'object' properties. Be precise in your "
        "counting - count each instance carefully and select the exact number word that matches your "
        "count. For example, if you see 7 apples, you should return 'seven' for number and 'apples' for "
        "object."
    ),
    "impossible_materials": (
        "This image shows a surreal scene with an object made of an unusual material, sitting on an "
        "unusual surface. Identify all three elements:\n"
        "1. What object is depicted (choose one from: chair, bicycle, bookshelf, piano, computer, "
        "refrigerator, watch, umbrella, camera, guitar)\n"
        "2. What unusual material the object appears to be made of (choose one from: liquid water, fire, "
        "smoke, mirrors, ice, tree bark, glass noodles, gelatin, paper, soap bubbles)\n"
        "3. What unusual surface the object is sitting on (choose one from: clouds, ocean waves, melting "
        "ice, sand dunes, moss, broken glass, spiderwebs, lily pads, autumn leaves, foam)\n"
        "Return your answer as a JSON object with 'object', 'material', and 'surface' properties, using "
        "exactly one of the provided options for each category."
    ),
    "nested_containment": (
        "This image shows a nested containment scene with three levels. Identify each level of containment "
        "from outside to inside:\n"
        "1. Outer container (choose one from: transparent cube, glass jar, wooden box, metal safe, woven "
        "basket, leather bag, ceramic pot, copper kettle, crystal sphere, rubber ball)\n"
        "2. Middle container (choose one from: small treasure chest, porcelain teacup, silk pouch, stone "
        "bowl, paper envelope, cardboard tube, tin can, shell, gold locket, velvet case)\n"
        "3. Inner object (choose one from: diamond, living butterfly, ticking clock, miniature planet, "
        "flickering flame, drop of mercury, hologram, glowing ember, snowflake, single cell organism)\n"
        "Return your answer as a JSON object with 'container1', 'container2', and 'object' properties, "
        "using exactly one of the provided options for each level of containment."
    ),
    "animals_vegetables_shapes": (
        "Examine this image and identify which elements are present. For each item in this list (lion, "
        "elephant, giraffe, tiger, bear, zebra, monkey, carrot, broccoli, potato, tomato, cucumber, onion, "
        "pepper, cube, sphere, cylinder, cone, pyramid, triangular prism), indicate with a boolean value "
        "(true/false) whether it appears in the image. Return your analysis as a JSON object with each "
        "element as a property."
    ),
    "stacked_foods": (
        "This image shows three foods stacked vertically.  Identify **each layer**:\n"
        "1. The food on the very top (choose one from: burger, pizza, salad, sushi, taco, donut, ice "
        "cream, pancake, spaghetti, sandwich)\n"
        "2. The food in the middle (same options)\n"
        "3. The food on the bottom (same options)\n"
        "\n"
        "Return a JSON object with the keys **'food_top'**, **'food_middle'**, and **'food_bottom'**, each "
        "containing exactly one of the allowed food names."
    ),
    "animals_chasing_chain": (
        "This image shows a *chase chain* of two **or** three animals.  All animals are chosen from the "
        "following list:\n"
        "lion, elephant, giraffe, crocodile, bear, snake, eagle, cow, zebra, tiger.\n"
        "\n"
        "Identify which animal appears in each ordered slot:\n"
        "• **animal1** – the one doing the chasing at the back of the chain\n"
        "• **animal2** – the one being chased (and possibly chasing another)\n"
        "• **animal3** – the animal at the very front that is only being chased\n"
        "\n"
        "Return a JSON object with exactly these keys:\n"
        "```json\n"
        "{\n"
        "  \"animal1\": \"<animal name>\",\n"
        "  \"animal2\": \"<animal name>\",\n"
        "  \"animal3\": \"<animal name>\",  \n"
        "}\n"
    ),
    "stacked_animals": (
        "This image shows three animals stacked vertically.  Identify **each layer**:\n"
        "1. The animal on the very top (choose one from: lion, elephant, giraffe, crocodile, bear, snake, "
        "eagle, cow, zebra, tiger)\n"
        "2. The animal in the middle (same options)\n"
        "3. The animal on the bottom (same options)\n"
        "\n"
        "Return a JSON object with the keys **'animal_top'**, **'animal_middle'**, and "
        "**'animal_bottom'**, each containing exactly one of the allowed animal names."
    ),
    "animals_with_adjectives": (
        "This image shows an animal with a certain characteristic, performing an action. Identify:\n"
        "1. The animal's characteristic/emotion (adjective) (choose from: happy, sad, angry, sleepy, "
        "curious, playful, scared, proud, surprised, bored)\n"
        "2. The animal (choose from: lion, elephant, giraffe, crocodile, bear, snake, eagle, cow, zebra, "
        "tiger)\n"
        "Return your answer as a JSON object with 'adjective' and 'animal' properties."
    ),
    "nested_containment_animals": (
        "This image depicts a surreal scene of animals nested within each other, like Matryoshka dolls. "
        "Identify:\n"
        "1. The outermost animal (container 1) (choose from: lion, elephant, giraffe, crocodile, bear, "
        "snake, eagle, cow, zebra, tiger)\n"
        "2. The middle animal (container 2) (choose from: lion, elephant, giraffe, crocodile, bear, snake, "
        "eagle, cow, zebra, tiger)\n"
        "3. The innermost animal (object) (choose from: lion, elephant, giraffe, crocodile, bear, snake, "
        "eagle, cow, zebra, tiger)\n"
        "Return your answer as a JSON object with 'animal_outer', 'animal_middle', and 'animal_inner' "
        "properties. Ensure the animals are identified from outermost to innermost."
    ),
    "three_animals_three_materials": (
        "This image shows three animals, each made from a different unusual material:\n"
        "\n"
        "1. One animal is made of **fire**\n"
        "2. One animal is made of **ice**\n"
        "3. One animal is made of **wood**\n"
        "\n"
        "All animals are chosen from the following list:\n"
        "lion, elephant, giraffe, crocodile, bear, snake, eagle, cow, zebra, tiger\n"
        "\n"
        "Return your answer as a JSON object with exactly these keys:\n"
        "{\n"
        "  \"animal_fire\": \"<animal name>\",\n"
        "  \"animal_ice\": \"<animal name>\",\n"
        "  \"animal_wood\": \"<animal name>\"\n"
        "}\n"
        "\n"
        "Each animal must be chosen from the list and appear only once across the three roles."
    ),
    "three_animals_three_verbs": (
        "This image shows three animals, each performing a different action:\n"
        "\n"
        "1. One animal is **singing**\n"
        "2. One animal is **eating**\n"
        "3. One animal is **sleeping**\n"
        "\n"
        "All animals are chosen from the following list:\n"
        "lion, elephant, giraffe, crocodile, bear, snake, eagle, cow, zebra, tiger\n"
        "\n"
        "Return your answer as a JSON object with exactly these keys:\n"
        "{\n"
        "  \"animal_singing\": \"<animal name>\",\n"
        "  \"animal_eating\": \"<animal name>\",\n"
        "  \"animal_sleeping\": \"<animal name>\"\n"
        "}\n"
        "\n"
        "Each animal must appear only once and be matched to exactly one verb."
    ),
    "three_animals_three_adjectives": (
        "This image depicts three animals, each showing a different emotion:\n"
        "\n"
        "1. One is **happy**\n"
        "2. One is **sad**\n"
        "3. One is **angry**\n"
        "\n"
        "All animals are chosen from this list:\n"
        "lion, elephant, giraffe, crocodile, bear, snake, eagle, cow, zebra, tiger\n"
        "\n"
        "Return your answer as a JSON object with exactly these keys:\n"
        "{\n"
        "  \"animal_happy\": \"<animal name>\",\n"
        "  \"animal_sad\": \"<animal name>\",\n"
        "  \"animal_angry\": \"<animal name>\"\n"
        "}\n"
        "\n"
        "Each animal should appear only once across the three roles."
    ),
    "three_animals_three_fixed_styles": (
        "This image shows three animals, each depicted in a different artistic style. Identify which "
        "animal is shown in each style:\n"
        "\n"
        "1. One animal is illustrated in **pixel art**\n"
        "2. One animal is illustrated in **oil painting**\n"
        "3. One animal is illustrated in **cartoon style**\n"
        "\n"
        "All animals are chosen from this list:\n"
        "lion, elephant, giraffe, crocodile, bear, snake, eagle, cow, zebra, tiger\n"
        "\n"
        "Return your answer as a JSON object with exactly these keys:\n"
        "{\n"
        "  \"animal_pixel\": \"<animal name>\",\n"
        "  \"animal_oil\": \"<animal name>\",\n"
        "  \"animal_cartoon\": \"<animal name>\"\n"
        "}\n"
        "\n"
        "Each animal must be unique and assigned to exactly one style."
    ),
    "three_animals_three_fixed_descriptors": (
        "This image shows three animals, each characterized by a distinct type of outer surface:\n"
        "\n"
        "1. One animal has **fur** (furry)\n"
        "2. One animal has **scales** (scaly)\n"
        "3. One animal has **feathers** (feathered)\n"
        "\n"
        "All animals are chosen from this list:\n"
        "lion, elephant, giraffe, crocodile, bear, snake, eagle, cow, zebra, tiger\n"
        "\n"
        "Return your answer as a JSON object with exactly these keys:\n"
        "{\n"
        "  \"animal_furry\": \"<animal name>\",\n"
        "  \"animal_scaly\": \"<animal name>\",\n"
        "  \"animal_feathered\": \"<animal name>\"\n"
        "}\n"
        "\n"
        "Each animal must be unique and assigned to exactly one descriptor."
    ),
    "animals_with_colours": (
        "This image shows an animal that has been colored in a specific way. Identify:\n"
        "\n"
        "1. Which animal is shown (choose from: lion, elephant, giraffe, crocodile, bear, snake, eagle, "
        "cow, zebra, tiger)\n"
        "2. What color the animal is (choose from: red, blue, green, yellow, orange, purple, pink, brown, "
        "black, white)\n"
        "\n"
        "Return your answer as a JSON object with the keys:\n"
        "{ \"animal\": \"<animal name>\", \"colour\": \"<colour name>\" }"
    ),
    "animals_with_style": (
        "This image shows an animal depicted in a particular artistic style. Identify:\n"
        "\n"
        "1. The animal shown (choose from: lion, elephant, giraffe, crocodile, bear, snake, eagle, cow, "
        "zebra, tiger)\n"
        "2. The artistic style used (choose from: watercolor, pixel art, oil painting, sketch, cartoon, "
        "origami, stained glass, pop art, charcoal, clay sculpture)\n"
        "\n"
        "Return your answer as a JSON object with keys: 'animal' and 'style'."
    ),
    "fruits_with_verbs": (
        "This image shows a fruit performing an action. Identify:\n"
        "\n"
        "1. Which fruit is shown (choose from: apple, banana, orange, grape, strawberry, watermelon, "
        "pineapple, mango, blueberry, peach)\n"
        "2. What action (verb) it is performing (choose from: dancing, flying, bouncing, sleeping, "
        "swimming, rolling, climbing, stretching, spinning, hiding)\n"
        "\n"
        "Return your answer as a JSON object with keys: 'fruit' and 'verb'."
    ),
    "animals_with_locations": (
        "This image shows a single animal located in a specific part of the scene. Identify:\n"
        "\n"
        "1. Which animal is shown (choose from: lion, elephant, giraffe, crocodile, bear, snake, eagle, "
        "cow, zebra, tiger)\n"
        "2. Where it appears (choose from: top left, top center, top right, middle left, center, middle "
        "right, bottom left, bottom center, bottom right)\n"
        "\n"
        "Return your answer as a JSON object with keys: 'animal' and 'location'."
    ),
    "counting_animals": (
        "This image shows multiple instances of a single animal species.\n"
        "\n"
        "Your task is to:\n"
        "1. **Identify which animal is shown** (choose one from: lion, elephant, giraffe, crocodile, bear, "
        "snake, eagle, cow, zebra, tiger)\n"
        "2. **Count EXACTLY how many of that animal appear** (choose one from: one, two, three, four, "
        "five, six, seven, eight, nine, ten)\n"
        "\n"
        "Return your answer as a JSON object with the keys **'number'** and **'animal'**.  Use the number "
        "**word** (e.g. `\"seven\"`) and the **plural** animal name (e.g. `\"lions\"`).  Be precise in "
        "your counting—count every individual animal you see."
    ),
    "animals_with_verbs": (
        "This image shows an animal performing an action. Identify:\n"
        "\n"
        "1. Which animal is shown (choose from: lion, elephant, giraffe, crocodile, bear, snake, eagle, "
        "cow, zebra, tiger)\n"
        "2. What action (verb) it is performing (choose from: eating, sleeping, running, jumping, flying, "
        "swimming, climbing, dancing, playing, hiding)\n"
        "\n"
        "Return your answer as a JSON object with keys: 'animal' and 'verb'."
    ),
    "animals_with_descriptor": (
        "This image shows an animal described by a physical or age trait.\n"
        "\n"
        "Animal (choose one): lion, elephant, giraffe, crocodile, bear, snake, eagle, cow, zebra, tiger\n"
        "Descriptor (choose one): furry, scaly, feathered, leathery, smooth, wrinkled, young, old, "
        "middle-aged, spotted\n"
        "\n"
        "Return your answer as a JSON object with keys: 'animal' and 'descriptor'."
    ),
}

# The 31 setups, in config.py's order.
SETUPS: dict[str, ImageSetup] = {s.name: s for s in (
    _pick("animals_short", _w("giraffe|lion|elephant|crocodile")),
    _pick("animals", _w("giraffe|lion|elephant|crocodile|bear|snake|eagle|cow")),
    _pick("animals_long", _w("giraffe|lion|elephant|crocodile|bear|snake|eagle|cow|zebra|tiger|rhino|"
                             "hippo|wolf|fox|deer|monkey|panda|koala|kangaroo|penguin")),
    _pick("objects", _w("red cube|blue sphere|green cylinder|yellow cone|purple pyramid|"
                        "orange triangular prism|black cuboid|brown triangular prism")),
    _pick("objects_two_colours", _w("red cube|green cube|blue sphere|orange sphere|green cylinder|"
                                    "purple cylinder|yellow cone|blue cone|purple pyramid|red pyramid|"
                                    "orange cuboid|yellow cuboid")),
    _pick("objects_three_colours", _w("red cube|green cube|blue cube|blue sphere|orange sphere|red sphere|"
                                      "green cylinder|purple cylinder|yellow cylinder|yellow cone|"
                                      "blue cone|green cone|purple pyramid|red pyramid|orange pyramid|"
                                      "orange cuboid|yellow cuboid|blue cuboid")),
    _pick("fruits_veggies_long", _w("apple|banana|orange|grape|strawberry|watermelon|pineapple|mango|"
                                    "blueberry|peach|lemon|cherry|carrot|broccoli|tomato|cucumber|potato|"
                                    "onion|pepper|lettuce")),
    _slots("animals_with_clothes", "{animal} wearing {clothing}",
           animal=_PETS_CAP,
           clothing=_w("a hat|a pair of sunglasses|a scarf|a bowtie|a jacket|a crown|a tie|a cape|"
                       "a sweater|a necklace")),
    _slots("animals_with_clothes_and_food", "{animal} wearing {clothing} eating {food}",
           animal=_PETS_CAP,
           clothing=_w("a hat|a pair of sunglasses|a scarf|a bowtie|a jacket|a crown|a tie|a cape|"
                       "a pair of pants|a pair of boots"),
           food=_w("a pizza|a banana|an ice cream|a cake|a hamburger|an apple|a watermelon|a donut|"
                   "a sandwich|a salad")),
    _slots("animals_with_food_eyes_and_clothes", "A {animal} with {food} as eyes wearing {clothing}",
           animal=_w("A cat|A bear|A lion|An elephant|A giraffe|A monkey|A zebra|A panda|A wolf|A rabbit"),
           food=_w("strawberries|oranges|burgers|watermelons|donuts|cookies|cupcakes|pizza|lemons|tomatoes"),
           clothing=_w("a crown|a cowboy hat|a scarf|a cape|a hawaiian shirt|a leather jacket|"
                       "a pair of pants|a tuxedo|a raincoat|sunglasses")),
    _slots("counting_objects", "An image with exactly {number} {object}",
           number=_w("one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
                     "fifteen|sixteen|seventeen|eighteen|nineteen|twenty"),
           object=_w("tomatoes|onions|oranges|wolves|bears|apples|bananas|carrots|cucumbers|strawberries|"
                     "lemons|cherries|grapes|peaches|pears|foxes|rabbits|cats|dogs|sheep")),
    _slots("impossible_materials", "A {object} made entirely of {material} sitting on a {surface}",
           object=_w("chair|bicycle|bookshelf|piano|computer|refrigerator|watch|umbrella|camera|guitar"),
           material=_w("liquid water|fire|smoke|mirrors|ice|tree bark|glass noodles|gelatin|paper|"
                       "soap bubbles"),
           surface=_w("clouds|ocean waves|melting ice|sand dunes|moss|broken glass|spiderwebs|lily pads|"
                      "autumn leaves|foam")),
    _slots("nested_containment", "A {container1} containing a {container2} containing a {object}",
           container1=_w("transparent cube|glass jar|wooden box|metal safe|woven basket|leather bag|"
                         "ceramic pot|copper kettle|crystal sphere|rubber ball"),
           container2=_w("small treasure chest|porcelain teacup|silk pouch|stone bowl|paper envelope|"
                         "cardboard tube|tin can|shell|gold locket|velvet case"),
           object=_w("diamond|living butterfly|ticking clock|miniature planet|flickering flame|"
                     "drop of mercury|hologram|glowing ember|snowflake|single cell organism")),
    _pick("animals_vegetables_shapes", _w("lion|elephant|giraffe|tiger|bear|zebra|monkey|carrot|broccoli|"
                                          "potato|tomato|cucumber|onion|pepper|cube|sphere|cylinder|cone|"
                                          "pyramid|triangular prism")),
    _slots("stacked_foods", "{food_top} on top of {food_middle} on top of {food_bottom}",
           food_top=_w("A burger|A pizza|A salad|Sushi|A taco|A donut|Ice cream|A pancake|Spaghetti|"
                       "A sandwich"),
           food_middle=_FOODS_LOWER,
           food_bottom=_FOODS_LOWER),
    _in_order("animals_chasing_chain", "{animal1} chasing {animal2} chasing {animal3}",
              _ZOO_CAP, _ZOO_LOWER, _ZOO_LOWER),
    _in_order("stacked_animals", "{animal_top} on top of {animal_middle} on top of {animal_bottom}",
              _ZOO_CAP, _ZOO_LOWER, _ZOO_LOWER),
    _slots("animals_with_adjectives", "A image of  a {adjective} {animal}",
           adjective=_w("happy|sad|angry|sleepy|curious|playful|scared|proud|surprised|bored"),
           animal=_ZOO),
    _in_order("nested_containment_animals",
              "A {animal_outer} containing a {animal_middle} containing an {animal_inner}",
              _ZOO_CAP, _ZOO_LOWER, _ZOO_LOWER_A_EAGLE),
    _in_order("three_animals_three_materials",
              "{animal_fire} made of fire, {animal_ice} made of ice, and {animal_wood} made of wood",
              _ZOO_CAP, _ZOO_LOWER, _ZOO_LOWER_A_EAGLE),
    _in_order("three_animals_three_verbs",
              "{animal_singing} singing, {animal_eating} eating, and {animal_sleeping} sleeping",
              _ZOO_CAP, _ZOO_LOWER, _ZOO_LOWER_A_EAGLE),
    _in_order("three_animals_three_adjectives",
              "A sad {animal_happy}, a happy {animal_sad}, and an angry {animal_angry}",
              _ZOO, _ZOO, _ZOO),
    _in_order("three_animals_three_fixed_styles",
              "A {animal_pixel} in pixel art, a {animal_oil} in oil painting, and a {animal_cartoon} in "
              "cartoon style",
              _ZOO, _ZOO, _ZOO),
    _in_order("three_animals_three_fixed_descriptors",
              "A {animal_furry} with fur, a {animal_scaly} with scales, and a {animal_feathered} with "
              "feathers",
              _ZOO, _ZOO, _ZOO),
    _slots("animals_with_colours", "A {colour} {animal}",
           animal=_ZOO,
           colour=_w("red|blue|green|yellow|orange|purple|pink|brown|black|white")),
    _slots("animals_with_style", "A {animal} illustrated in {style} style",
           animal=_ZOO,
           style=_w("watercolor|pixel art|oil painting|sketch|cartoon|origami|stained glass|pop art|"
                    "charcoal|clay sculpture")),
    _slots("fruits_with_verbs", "A {fruit} is {verb}",
           fruit=_w("apple|banana|orange|grape|strawberry|watermelon|pineapple|mango|blueberry|peach"),
           verb=_w("dancing|flying|bouncing|sleeping|swimming|rolling|climbing|stretching|spinning|hiding")),
    _slots("animals_with_locations", "A {animal} in the {location}",
           animal=_ZOO,
           location=_w("top left|top center|top right|middle left|center|middle right|bottom left|"
                       "bottom center|bottom right")),
    _slots("counting_animals", "An image with exactly {number} {animal}",
           number=_w("one|two|three|four|five|six|seven|eight|nine|ten"),
           animal=_w("lions|elephants|giraffes|crocodiles|bears|snakes|eagles|cows|zebras|tigers")),
    _slots("animals_with_verbs", "A {animal} is {verb}",
           animal=_ZOO,
           verb=_w("eating|sleeping|running|jumping|flying|swimming|climbing|dancing|playing|hiding")),
    _slots("animals_with_descriptor", "A {descriptor} {animal}",
           animal=_ZOO,
           descriptor=_w("furry|scaly|feathered|leathery|smooth|wrinkled|young|old|three-legged|spotted")),
)}


def combinations(setup: ImageSetup) -> np.ndarray:
    """Each prompt's word indices, in prompt order: (n, n_slots) for `slots`, (n, k) item indices
    for `pick`, int64."""
    if setup.kind == "pick":
        rows = itertools.combinations(range(len(setup.words[0])), setup.k)
    else:
        rows = itertools.product(*(range(len(w)) for w in setup.words))
    return np.array(list(rows), dtype=np.int64).reshape(setup.n_prompts, -1)


def render(setup: ImageSetup, combination: Sequence[int]) -> str:
    """The prompt of one row of `combinations`, as the anchor writes it."""
    if setup.kind == "pick":
        return "An image with " + ", ".join(f"one {setup.words[0][i]}" for i in combination)
    chosen = {slot: words[i] for slot, words, i in zip(setup.slots, setup.words, combination, strict=True)}
    return setup.template.format(**_singular_after_one(chosen))


# The anchor's grammar patch for "exactly one {object}" (data.py), with its own table and rule.
_IRREGULAR_SINGULARS = {"wolves": "wolf", "tomatoes": "tomato", "potatoes": "potato", "foxes": "fox"}


def _singular_after_one(chosen: dict[str, str]) -> dict[str, str]:
    if chosen.get("number") != "one" or "object" not in chosen:
        return chosen
    word = chosen["object"]
    singular = _IRREGULAR_SINGULARS.get(word, word[:-1] if word.endswith("s") else word)
    return {**chosen, "object": singular}


def prompts(setup: ImageSetup) -> list[str]:
    """Every prompt of the setup, in the fixed order of `combinations`."""
    return [render(setup, row) for row in combinations(setup)]


def labels(setup: ImageSetup) -> np.ndarray:
    """(n_prompts, n_bits) uint8: one one-hot block per slot, concatenated (the items' 3-hot block
    for `pick`); the bits are named by `setup.constituents`."""
    rows = combinations(setup)
    out = np.zeros((len(rows), len(setup.constituents)), dtype=np.uint8)
    if setup.kind == "pick":
        np.put_along_axis(out, rows, 1, axis=1)
        return out
    offsets = np.cumsum([0] + [len(w) for w in setup.words[:-1]])
    np.put_along_axis(out, rows + offsets, 1, axis=1)
    return out


def decode(setup: ImageSetup, label_rows: np.ndarray) -> list[tuple[str, ...]]:
    """The words (`slots`, one per slot) or items (`pick`) that label rows switch on.

    Rows that are not one-hot in every slot (or not k-hot for `pick`) raise ValueError: a label
    must name exactly one word per slot.
    """
    label_rows = np.atleast_2d(np.asarray(label_rows))
    n_bits = len(setup.constituents)
    if label_rows.shape[1] != n_bits:
        raise ValueError(f"{setup.name} labels have {n_bits} bits, not {label_rows.shape[1]}")
    blocks = np.split(label_rows != 0, np.cumsum([len(w) for w in setup.words[:-1]]), axis=1)
    want = setup.k if setup.kind == "pick" else 1
    if any((b.sum(axis=1) != want).any() for b in blocks):
        raise ValueError(f"every {setup.name} label must switch on {want} bit(s) per slot")
    if setup.kind == "pick":
        return [tuple(setup.words[0][i] for i in np.flatnonzero(row)) for row in blocks[0]]
    picks = np.stack([b.argmax(axis=1) for b in blocks], axis=1)
    return [tuple(w[i] for w, i in zip(setup.words, row, strict=True)) for row in picks]


def seeds(n_prompts: int, n_seeds: int, base_seed: int = ANCHOR_SEED) -> np.ndarray:
    """(n_prompts, n_seeds) int64: prompt i's k-th image seed, base + i·n_seeds + k (analysis.py)."""
    return base_seed + np.arange(n_prompts * n_seeds, dtype=np.int64).reshape(n_prompts, n_seeds)


@dataclass(frozen=True, eq=False)  # eq=False: field-wise == on arrays has no truth value
class PromptSplit:
    """Prompts split into training and held-out ones, with this project's coverage report.

    `train` and `test` are sorted, disjoint prompt indices covering 0..n-1 (read-only). A
    constituent is covered when at least one training prompt has it; `missing_constituents` names
    those that are not, in label order. `params` records how the split was drawn.
    """

    n: int
    train: np.ndarray
    test: np.ndarray
    covers_all_constituents: bool
    missing_constituents: tuple[str, ...]
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        for arr in (self.train, self.test):
            arr.setflags(write=False)

    def seed_rows(self, n_seeds: int) -> tuple[np.ndarray, np.ndarray]:
        """Training and held-out rows of the image table, row = prompt·n_seeds + k (the layout of
        `seeds`): all seeds of a prompt fall on its side, since the split is by prompt."""
        rows = lambda p: (p[:, None] * n_seeds + np.arange(n_seeds)).ravel()  # noqa: E731
        return rows(self.train), rows(self.test)

    def summary(self) -> dict:
        """Counts and the coverage report, JSON-serialisable."""
        return dict(n=self.n, n_train=len(self.train), n_test=len(self.test),
                    test_fraction=len(self.test) / self.n,
                    covers_all_constituents=self.covers_all_constituents,
                    missing_constituents=list(self.missing_constituents), params=dict(self.params))


def draw_test(n: int, test_fraction: float = 0.3, seed: int = ANCHOR_SEED) -> np.ndarray:
    """The held-out indices of sklearn's ShuffleSplit (train_test_split's rule), sorted:
    ceil(test_fraction·n) of them, the head of RandomState(seed).permutation(n)."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in the open interval (0, 1), got {test_fraction!r}")
    n_test = math.ceil(test_fraction * n)
    if not 0 < n_test < n:
        raise ValueError(f"holding out {test_fraction:g} of {n} prompts leaves no training or no test prompt")
    return np.sort(np.random.RandomState(seed).permutation(n)[:n_test])


def split_by_test(present: np.ndarray, names: Sequence[str], test: Sequence[int], **params) -> PromptSplit:
    """The split that holds out the rows `test`, with its coverage report.

    `present` is (n, n_constituents), non-zero where a row has a constituent; `names` names its
    columns. Used by `split` and by hand-made splits alike.
    """
    present = np.asarray(present) != 0
    n = len(present)
    test = np.unique(np.asarray(test, dtype=np.int64))
    if test.size and (test[0] < 0 or test[-1] >= n):
        raise ValueError(f"held-out rows must lie in 0..{n - 1}")
    is_test = np.zeros(n, dtype=bool)
    is_test[test] = True
    covered = present[~is_test].any(axis=0)
    missing = tuple(name for name, c in zip(names, covered, strict=True) if not c)
    return PromptSplit(n=n, train=np.flatnonzero(~is_test), test=np.flatnonzero(is_test),
                       covers_all_constituents=not missing, missing_constituents=missing, params=params)


def split(setup: ImageSetup, test_fraction: float = 0.3, seed: int = ANCHOR_SEED) -> PromptSplit:
    """The anchor's random split by prompt (`draw_test`), with the coverage report."""
    test = draw_test(setup.n_prompts, test_fraction, seed)
    return split_by_test(labels(setup), setup.constituents, test, setup=setup.name,
                         test_fraction=test_fraction, seed=seed)
