"""The image family: the anchor's setups as data (image_setups.py) and the rendered family with its
exact reader (images.py).

Prompt counts, orders and the grammar patch are pinned against the anchor's config.py and data.py
(Florian-toll/compgen-vision) as read; the reader is checked on every combination, with noise,
and on images that must not read as their prompt.
"""

import math

import numpy as np
import pytest
import torch

from constructions.tasks import image_setups as setups
from constructions.tasks import images as fam

# Prompts per setup: a×b(×c) for slot templates, C(n, 3) for pick-3 sets (config.py, as read).
COUNTS = {
    "animals_short": math.comb(4, 3), "animals": math.comb(8, 3), "animals_long": math.comb(20, 3),
    "objects": math.comb(8, 3), "objects_two_colours": math.comb(12, 3),
    "objects_three_colours": math.comb(18, 3), "fruits_veggies_long": math.comb(20, 3),
    "animals_vegetables_shapes": math.comb(20, 3),
    "animals_with_clothes": 100, "animals_with_clothes_and_food": 1000,
    "animals_with_food_eyes_and_clothes": 1000, "counting_objects": 400, "impossible_materials": 1000,
    "nested_containment": 1000, "stacked_foods": 1000, "animals_chasing_chain": 1000,
    "stacked_animals": 1000, "animals_with_adjectives": 100, "nested_containment_animals": 1000,
    "three_animals_three_materials": 1000, "three_animals_three_verbs": 1000,
    "three_animals_three_adjectives": 1000, "three_animals_three_fixed_styles": 1000,
    "three_animals_three_fixed_descriptors": 1000, "animals_with_colours": 100, "animals_with_style": 100,
    "fruits_with_verbs": 100, "animals_with_locations": 90, "counting_animals": 100,
    "animals_with_verbs": 100, "animals_with_descriptor": 100,
}
SCENES = [fam.Scene(n_objects=1), fam.Scene(n_objects=2)]


# ---- the anchor's setups -------------------------------------------------------------------


def test_the_registry_holds_the_anchors_31_setups_with_their_prompt_counts():
    assert len(setups.SETUPS) == 31 and set(setups.SETUPS) == set(COUNTS)
    kinds = [s.kind for s in setups.SETUPS.values()]
    assert kinds.count("pick") == 8 and kinds.count("slots") == 23
    for name, setup in setups.SETUPS.items():
        p = setups.prompts(setup)
        assert setup.n_prompts == len(p) == COUNTS[name], name
        assert len(set(p)) == len(p), f"{name}: two combinations render the same prompt"


def test_prompts_follow_the_anchors_order_and_rendering():
    clothes = setups.prompts(setups.SETUPS["animals_with_clothes"])
    assert clothes[:2] == ["A cat wearing a hat", "A cat wearing a pair of sunglasses"]
    assert clothes[10] == "A dog wearing a hat" and clothes[-1] == "A panda wearing a necklace"
    animals = setups.prompts(setups.SETUPS["animals"])
    assert animals[0] == "An image with one giraffe, one lion, one elephant"
    assert animals[-1] == "An image with one snake, one eagle, one cow"
    three = setups.prompts(setups.SETUPS["impossible_materials"])
    assert three[1] == "A chair made entirely of liquid water sitting on a ocean waves"
    assert three[10] == "A chair made entirely of fire sitting on a clouds"  # the last slot runs fastest
    assert three[100] == "A bicycle made entirely of liquid water sitting on a clouds"


def test_the_counting_template_makes_one_object_singular_as_the_anchor_does():
    counting = setups.prompts(setups.SETUPS["counting_objects"])
    # The anchor's table for wolves and tomatoes, its trailing-s rule for the rest.
    for text in ("An image with exactly one wolf", "An image with exactly one tomato",
                 "An image with exactly one cherrie", "An image with exactly two cherries",
                 "An image with exactly one sheep"):
        assert text in counting
    # counting_animals has no slot "object": no patch.
    assert "An image with exactly one lions" in setups.prompts(setups.SETUPS["counting_animals"])


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_labels_decode_to_the_words_of_the_prompt(name):
    setup = setups.SETUPS[name]
    y, p = setups.labels(setup), setups.prompts(setup)
    per_row = setup.k if setup.kind == "pick" else len(setup.slots)
    assert y.shape == (len(p), sum(len(w) for w in setup.words)) and (y.sum(axis=1) == per_row).all()
    for text, words in zip(p, setups.decode(setup, y), strict=True):
        if setup.kind == "pick":
            assert text == "An image with " + ", ".join(f"one {w}" for w in words)
        else:
            chosen = dict(zip(setup.slots, words, strict=True))
            if chosen.get("number") == "one" and "object" in chosen:
                chosen["object"] = text.rsplit("one ", 1)[1]  # the patched word, checked elsewhere
            assert text == setup.template.format(**chosen)


def test_decode_refuses_a_label_that_is_not_one_hot_per_slot():
    setup = setups.SETUPS["animals_with_clothes"]
    y = setups.labels(setup)[:1].copy()
    y[0, 1] = 1  # a second animal
    with pytest.raises(ValueError, match="bit"):
        setups.decode(setup, y)


def test_there_is_one_judge_question_per_slot_naming_its_options():
    for setup in setups.SETUPS.values():
        options = setup.words[0] if setup.kind == "pick" else setup.slots
        assert len(setup.questions) == len(options), setup.name
        if setup.kind == "slots":
            for question, slot, words in zip(setup.questions, setup.slots, setup.words, strict=True):
                assert question.startswith(slot) and all(w in question for w in words)
        assert setup.judge_prompt.strip()
    assert setups.SETUPS["animals"].questions[0] == "Whether giraffe is in the image"


@pytest.mark.parametrize("name", ["animals_short", "animals", "animals_with_locations", "counting_objects",
                                  "stacked_animals"])
def test_split_holds_out_ceil_of_the_fraction_and_is_a_partition(name):
    setup = setups.SETUPS[name]
    s = setups.split(setup)
    n = setup.n_prompts
    assert len(s.test) == math.ceil(0.3 * n) and len(s.train) == n - len(s.test)
    assert np.intersect1d(s.train, s.test).size == 0
    assert np.array_equal(np.union1d(s.train, s.test), np.arange(n))
    assert s.summary()["n_test"] == len(s.test)


def test_split_is_deterministic_by_seed():
    setup = setups.SETUPS["animals_with_clothes"]
    a, b, c = setups.split(setup, seed=3), setups.split(setup, seed=3), setups.split(setup, seed=4)
    assert np.array_equal(a.test, b.test) and not np.array_equal(a.test, c.test)
    assert setups.split(setup, test_fraction=0.5).test.size == 50
    with pytest.raises(ValueError):
        setups.split(setup, test_fraction=1.0)


def test_every_seed_of_a_prompt_stays_on_its_side():
    assert np.array_equal(setups.seeds(3, 2), [[42, 43], [44, 45], [46, 47]])
    s = setups.split(setups.SETUPS["animals_with_clothes"])
    train_rows, test_rows = s.seed_rows(4)
    assert np.array_equal(np.unique(train_rows // 4), s.train)
    assert np.array_equal(np.unique(test_rows // 4), s.test)
    assert len(train_rows) == 4 * len(s.train) and np.intersect1d(train_rows, test_rows).size == 0
    # The seed table's rows are the image rows: a prompt's seeds sit in its 4 consecutive rows.
    assert np.array_equal(setups.seeds(100, 4).ravel()[test_rows] - 42, test_rows)


def test_a_split_that_hides_a_constituent_is_reported_as_not_covering():
    setup = setups.SETUPS["animals_with_clothes"]
    y = setups.labels(setup)
    assert setups.split(setup).covers_all_constituents
    no_cat = setups.split_by_test(y, setup.constituents, np.arange(10))  # the ten "A cat wearing ..."
    assert not no_cat.covers_all_constituents and no_cat.missing_constituents == ("animal=A cat",)
    hats = np.flatnonzero(y[:, setup.constituents.index("clothing=a hat")])
    assert setups.split_by_test(y, setup.constituents, hats).missing_constituents == ("clothing=a hat",)
    pick = setups.SETUPS["animals"]
    giraffes = [i for i, t in enumerate(setups.prompts(pick)) if "giraffe" in t]
    assert setups.split_by_test(setups.labels(pick), pick.constituents, giraffes).missing_constituents == (
        "giraffe",)


# ---- the rendered family -------------------------------------------------------------------


@pytest.mark.parametrize("scene", SCENES, ids=["one", "two"])
def test_every_combination_renders_and_reads_back_exactly(scene):
    combos = fam.combinations(scene)
    assert len(combos) == {1: 4 * 4 * 4, 2: 16 * 16 * 6}[scene.n_objects]
    assert (np.diff(combos[..., 2], axis=1) > 0).all()  # different positions, in reading order
    images = fam.render(scene, combos)
    assert images.shape == (len(combos), 16, 16, 3) and images.dtype == np.uint8
    assert len(np.unique(images.reshape(len(images), -1), axis=0)) == len(combos)
    reading = fam.read(scene, images)
    assert reading.found.all() and (reading.n_present == scene.n_objects).all()
    assert np.array_equal(reading.attributes, combos) and fam.correct(reading, combos).all()


@pytest.mark.parametrize("scene", SCENES, ids=["one", "two"])
def test_reading_stays_exact_under_noise_of_a_tenth_of_full_scale(scene):
    combos = fam.combinations(scene)
    clean = fam.render(scene, combos)
    for seed in range(2):
        noisy = fam.add_noise(clean, sd=0.1 * 255, seed=seed)
        assert np.abs(noisy.astype(int) - clean).mean() > 5  # the noise is there
        assert fam.correct(fam.read(scene, noisy), combos).all()
    # Far more noise must break it: the check above is not vacuous.
    assert not fam.correct(fam.read(scene, fam.add_noise(clean, sd=0.3 * 255)), combos).all()


def test_a_blank_or_garbled_image_is_not_read_as_its_prompt():
    scene = SCENES[1]
    combos = fam.combinations(scene)[:64]
    blank = fam.read(scene, np.zeros((64, 16, 16, 3), np.uint8))
    assert not blank.found.any() and (blank.n_present == 0).all() and (blank.attributes == -1).all()
    assert not fam.correct(blank, combos).any()
    garbled = np.random.default_rng(0).integers(0, 256, (64, 16, 16, 3), dtype=np.uint8)
    assert not fam.correct(fam.read(scene, garbled), combos).any()
    # Objects shifted by half a quadrant straddle two quadrants: never read as their prompt.
    shifted = np.roll(fam.render(scene, combos), 4, axis=2)
    assert not fam.correct(fam.read(scene, shifted), combos).any()


def test_an_object_of_two_colours_is_not_found():
    scene = SCENES[0]
    combos = fam.combinations(scene)
    images = fam.render(scene, combos)
    for image, (_, colour, _) in zip(images, combos[:, 0], strict=True):
        # Two fifths of the object's pixels in the next palette colour: the majority stays right.
        pixels = np.argwhere(image.max(axis=-1) > 0)
        part = pixels[: 2 * len(pixels) // 5]
        image[part[:, 0], part[:, 1]] = fam.RGB[(colour + 1) % 4]
    reading = fam.read(scene, images)
    assert not reading.found.any() and (reading.n_present == 1).all()
    assert not fam.correct(reading, combos).any()


def test_a_wrong_colour_or_shape_is_read_as_such():
    scene = SCENES[0]
    combos = fam.combinations(scene)
    for column in (0, 1):  # shape, colour
        other = combos.copy()
        other[..., column] = (other[..., column] + 1) % 4
        reading = fam.read(scene, fam.render(scene, other))
        assert np.array_equal(reading.attributes, other) and not fam.correct(reading, combos).any()
        right = fam.slot_correct(reading, combos)
        assert not right[..., column].any() and right[..., 2].all()


def test_an_extra_object_makes_a_reading_incomplete():
    two = fam.render(SCENES[1], fam.combinations(SCENES[1])[:20])
    reading = fam.read(SCENES[0], two)
    assert (reading.n_present == 2).all() and not reading.complete.any()


def test_read_takes_floats_and_torch_tensors():
    scene = SCENES[1]
    images = fam.render(scene, fam.combinations(scene)[::50])
    want = fam.read(scene, images).attributes
    assert np.array_equal(fam.read(scene, images.astype(np.float32)).attributes, want)
    assert np.array_equal(fam.read(scene, torch.from_numpy(images)).attributes, want)
    with pytest.raises(ValueError, match="images must be"):
        fam.read(scene, images[:, :8])


def test_prompts_and_labels_agree():
    two = fam.prompt(SCENES[1], [[0, 0, 0], [1, 2, 3]])
    assert two == "a red square top left and a blue circle bottom right"
    for scene in SCENES:
        y, names = fam.labels(scene), fam.label_names(scene)
        assert y.shape == (len(fam.combinations(scene)), 12 * scene.n_objects) and len(names) == y.shape[1]
        assert (y.sum(axis=1) == 3 * scene.n_objects).all()
        for text, row in zip(fam.prompts(scene), y, strict=True):
            on = dict(names[i].split("=") for i in np.flatnonzero(row))
            objects = [f"a {on[f'colour{k}']} {on[f'shape{k}']} {on[f'position{k}']}"
                       for k in ([""] if scene.n_objects == 1 else ["_1", "_2"])]
            assert text == " and ".join(objects)


def test_render_refuses_shared_positions_and_bad_indices():
    scene = SCENES[1]
    # The same position twice, reversed reading order, a shape index and a position out of range.
    for bad in ([[0, 0, 1], [1, 1, 1]], [[0, 0, 2], [1, 1, 1]], [[4, 0, 0], [0, 0, 1]],
                [[0, 0, 0], [0, 0, 4]]):
        with pytest.raises(ValueError):
            fam.render(scene, [bad])
    with pytest.raises(ValueError):
        fam.Scene(size=14)
    with pytest.raises(ValueError):
        fam.Scene(rgb=((100, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0)))


def test_the_family_split_reports_coverage_of_every_attribute_value():
    scene = SCENES[1]
    combos = fam.combinations(scene)
    s = fam.split(scene, test_fraction=0.3, seed=0)
    assert len(s.test) == math.ceil(0.3 * len(combos)) and np.intersect1d(s.train, s.test).size == 0
    assert s.covers_all_constituents and np.array_equal(fam.split(scene, seed=0).test, s.test)
    assert not np.array_equal(fam.split(scene, seed=1).test, s.test)
    present, names = fam.constituents(scene)
    yellow = np.flatnonzero((combos[..., 1] == 3).any(axis=1))
    hidden = setups.split_by_test(present, names, yellow)
    assert not hidden.covers_all_constituents and hidden.missing_constituents == ("colour=yellow",)
    # Position "bottom right" is the second object's in reading order, never the first's: coverage
    # pools the objects, so it counts as covered.
    assert "position=bottom right" not in s.missing_constituents
