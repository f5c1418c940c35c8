"""The judges: the exact one scored on renders with known labels and on wrong images; the clip
and llm ones tested for their plumbing only (a tiny random CLIP, a fake VLM), never for answers."""

import io
import json
import sys

import numpy as np
import pytest

from constructions.tasks import image_setups
from constructions.tasks import images as scenes
from verify.cli import UsageError
from verify.images import judges

CLOTHES = image_setups.SETUPS["animals_with_clothes"]
PICK = image_setups.SETUPS["animals_short"]


# --- exact ---------------------------------------------------------------------------------------

def test_the_exact_judge_passes_renders_of_their_own_prompts():
    scene = scenes.Scene(n_objects=2)
    rows = np.arange(0, len(scenes.combinations(scene)), 37)
    x = scenes.render(scene, scenes.combinations(scene)[rows])
    judge = judges.ExactJudge()
    assert judge.judge(x, scene, rows).shape == (len(rows), 6) and judge.judge(x, scene, rows).all()
    assert judge.success(x, scene, rows).all()
    assert judges.slot_names(scene) == ("shape_1", "colour_1", "position_1",
                                        "shape_2", "colour_2", "position_2")
    np.testing.assert_array_equal(judge.judge(x / 255.0, scene, rows), judge.judge(x, scene, rows))  # floats
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        judge.judge(x.astype(np.float32), scene, rows)  # floats in 0..255 are refused, not misread
    noisy = scenes.add_noise(x, seed=1)
    assert judge.success(noisy, scene, rows).all()


def test_the_exact_judge_marks_the_wrong_slots_of_wrong_images():
    scene = scenes.Scene(n_objects=2)
    combos = scenes.combinations(scene)
    rows = np.array([0, 100, 700])
    wrong = combos[rows].copy()
    wrong[0, 0, 1] = (wrong[0, 0, 1] + 1) % 4  # image 0: the first object's colour
    wrong[1, 1, 0] = (wrong[1, 1, 0] + 1) % 4  # image 1: the second object's shape
    x = scenes.render(scene, wrong)
    got = judges.ExactJudge().judge(x, scene, rows)
    want = np.ones((3, 6), dtype=bool)
    want[0, 1] = want[1, 3] = False
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(judges.ExactJudge().success(x, scene, rows), [False, False, True])
    blank = np.zeros_like(x[:1])
    assert not judges.ExactJudge().judge(blank, scene, rows[:1]).any()


def test_an_extra_object_fails_the_image_though_every_slot_is_right():
    one, two = scenes.Scene(n_objects=1), scenes.Scene(n_objects=2)
    pair = np.array([[[0, 0, 0], [1, 2, 3]]])  # a red square top left, a blue circle bottom right
    x = scenes.render(two, pair)
    row = int(np.flatnonzero((scenes.combinations(one)[:, 0] == [0, 0, 0]).all(axis=1))[0])
    verdict = judges.ExactJudge().evaluate(x, one, [row])
    assert verdict.slot_correct.all() and not verdict.success.any()


def test_the_exact_judge_refuses_a_setup_and_mismatched_rows():
    with pytest.raises(UsageError, match="rendered family"):
        judges.ExactJudge().judge(np.zeros((1, 16, 16, 3), np.uint8), CLOTHES, [0])
    scene = scenes.Scene()
    with pytest.raises(ValueError, match="2 images for 1 prompt rows"):
        judges.ExactJudge().judge(np.zeros((2, 16, 16, 3), np.uint8), scene, [0])
    with pytest.raises(ValueError, match="prompt rows"):
        judges.ExactJudge().judge(np.zeros((1, 16, 16, 3), np.uint8), scene, [10_000])


# --- candidate texts, questions ----------------------------------------------------------------

def test_candidate_texts_swap_one_slot_and_contain_the_prompt():
    scene = scenes.Scene(n_objects=2)
    row = 300
    combo = scenes.combinations(scene)[row]
    texts = judges.candidate_texts(scene, row)
    assert [len(t) for t in texts] == [4, 4, 4, 4, 4, 4]
    truth = judges.truth(scene, [row])[0]
    for slot, options in enumerate(texts):
        assert options[truth[slot]] == scenes.prompt(scene, combo)
    texts = judges.candidate_texts(CLOTHES, 11)  # A dog wearing a pair of sunglasses
    assert texts[0][2] == "A bear wearing a pair of sunglasses" and texts[1][0] == "A dog wearing a hat"
    assert judges.candidate_texts(PICK, 0) == [[f"An image with one {a}" for a in PICK.words[0]]]
    np.testing.assert_array_equal(judges.truth(PICK, [0]), [[1, 1, 1, 0]])


def test_answers_match_words_up_to_case_and_articles():
    assert judges.normalise("A cat") == judges.normalise("cat") == "cat"
    assert judges.normalise("a pair of sunglasses") == judges.normalise("Sunglasses")
    assert judges.normalise("stone bowl") == "stone bowl"  # the anchor's matching made it "stbowl"
    assert judges.normalise("An  elephant ") == "elephant"


# --- clip: plumbing ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory):
    pytest.importorskip("transformers")
    from verify.images import tiny

    return tiny.build_clip(tmp_path_factory.mktemp("clip") / "clip")


def _oracle(seen):
    """A scorer that "sees" in image i the text seen(i): a text scores the number of its words that
    agree, place by place, with that text (a set of texts: 1 for each text in it)."""
    def similarity(text, target):
        if isinstance(target, set):
            return float(text in target)
        return sum(a == b for a, b in zip(text.split(), target.split(), strict=False))

    def scores(x, texts):
        return np.array([[similarity(t, seen(i)) for t in texts] for i in range(len(x))])
    return scores


def test_the_clip_judge_runs_a_tiny_clip_from_a_local_folder(clip_folder):
    judge = judges.ClipJudge(str(clip_folder))
    scene = scenes.Scene()
    rows = np.array([0, 17, 40])
    x = scenes.render(scene, scenes.combinations(scene)[rows])
    got = judge.judge(x, scene, rows)
    assert got.shape == (3, 3) and got.dtype == bool
    np.testing.assert_array_equal(judge.judge(x, scene, rows), got)  # deterministic
    sims = judge.scores(x, ["a red square top left", "a blue circle"])
    assert sims.shape == (3, 2) and np.isfinite(sims).all() and (np.abs(sims) <= 1 + 1e-5).all()
    assert judge.describe() == {"name": "clip", "path": str(clip_folder)}


def test_the_clip_judge_turns_scores_into_slot_answers(clip_folder, monkeypatch):
    judge = judges.ClipJudge(str(clip_folder))
    scene = scenes.Scene(n_objects=2)
    rows = np.array([5, 250, 1000])
    combos = scenes.combinations(scene)[rows]
    x = scenes.render(scene, combos)
    prompts = [scenes.prompt(scene, c) for c in combos]
    monkeypatch.setattr(judge, "scores", _oracle(lambda i: prompts[i]))
    assert judge.judge(x, scene, rows).all()

    def wrong_colour_2(i):  # image 1 looks, to this scorer, like another colour of object 2
        if i != 1:
            return prompts[i]
        c = combos[1].copy()
        c[1, 1] = (c[1, 1] + 1) % 4
        return judges.prompt_text(scene, c)

    monkeypatch.setattr(judge, "scores", _oracle(wrong_colour_2))
    got = judge.judge(x, scene, rows)
    want = np.ones((3, 6), dtype=bool)
    want[1, 4] = False
    np.testing.assert_array_equal(got, want)
    # A pick setup: the k best items are the answer, one slot per item.
    picks = np.array([0, 3])
    items = [set(f"An image with one {w}" for w in image_setups.decode(PICK, image_setups.labels(PICK)[r])[0])
             for r in picks]
    monkeypatch.setattr(judge, "scores", _oracle(lambda i: items[i]))
    blank = np.zeros((2, 16, 16, 3), np.uint8)
    assert judge.judge(blank, PICK, picks).shape == (2, 4) and judge.judge(blank, PICK, picks).all()
    monkeypatch.setattr(judge, "scores", _oracle(lambda i: items[1 - i]))
    np.testing.assert_array_equal(judge.judge(blank, PICK, picks), [[False, True, True, False]] * 2)


def test_the_clip_judge_refuses_a_missing_checkpoint(tmp_path):
    pytest.importorskip("transformers")
    with pytest.raises(UsageError, match="cannot be loaded from local files") as e:
        judges.ClipJudge(str(tmp_path / "nothing"))
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match="needs a local CLIP"):
        judges.make("clip")


# --- llm: plumbing -----------------------------------------------------------------------------

class FakeResponse:
    def __init__(self, text):
        self._text = text

    def text(self):
        return self._text


class FakeModel:
    """Answers from a list, one per call, and remembers every call."""

    model_id = "fake-vlm"

    def __init__(self, answers):
        self.answers, self.calls = list(answers), []

    def prompt(self, text, attachments=(), schema=None, **options):
        self.calls.append({"text": text, "attachments": attachments, "schema": schema, "options": options})
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return FakeResponse(answer if isinstance(answer, str) else json.dumps(answer))


@pytest.fixture
def no_llm(monkeypatch):
    monkeypatch.setitem(sys.modules, "llm", None)  # import llm raises ImportError


def test_the_llm_judge_asks_the_anchors_question_at_temperature_zero(no_llm):
    from PIL import Image

    rows = [0, 11]  # A cat wearing a hat; A dog wearing a pair of sunglasses
    x = np.stack([np.full((16, 16, 3), 10 * (i + 1), np.uint8) for i in range(2)])
    model = FakeModel([{"animal": "cat", "clothing": "Hat"}, {"animal": "A dog", "clothing": "scarf"}])
    verdict = judges.LlmJudge(model, wait_s=0).evaluate(x, CLOTHES, rows)
    np.testing.assert_array_equal(verdict.slot_correct, [[True, True], [True, False]])
    np.testing.assert_array_equal(verdict.success, [True, False])
    assert len(model.calls) == 2
    call = model.calls[0]
    assert call["text"] == CLOTHES.judge_prompt and call["options"] == {"temperature": 0.0}
    props = call["schema"]["properties"]
    assert list(props) == ["animal", "clothing"] and call["schema"]["required"] == ["animal", "clothing"]
    assert [p["description"] for p in props.values()] == list(CLOTHES.questions)
    (attachment,) = call["attachments"]
    assert attachment.type == "image/png" and attachment.content.startswith(b"\x89PNG")
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(attachment.content))), x[0])


def test_the_llm_judge_per_slot_pick_and_failures(no_llm):
    x = np.zeros((1, 16, 16, 3), np.uint8)
    model = FakeModel([{"animal": "cat"}, {"clothing": "a pair of sunglasses"}])
    judge = judges.LlmJudge(model, per_slot=True, wait_s=0)
    np.testing.assert_array_equal(judge.judge(x, CLOTHES, [1]), [[True, True]])
    assert [list(c["schema"]["properties"]) for c in model.calls] == [["animal"], ["clothing"]]
    assert model.calls[1]["text"].endswith(CLOTHES.questions[1])
    # Pick: one boolean per item (prompt 0 has giraffe, lion, elephant).
    model = FakeModel([{"giraffe": True, "lion": True, "elephant": "true", "crocodile": True}])
    np.testing.assert_array_equal(judges.LlmJudge(model).judge(x, PICK, [0]), [[True, True, True, False]])
    assert all(p["type"] == "boolean" for p in model.calls[0]["schema"]["properties"].values())
    # Not JSON, then a client error on every retry: all slots wrong, two failures counted.
    model = FakeModel(["no idea", RuntimeError("busy"), RuntimeError("busy")])
    judge = judges.LlmJudge(model, retries=2, wait_s=0)
    assert not judge.judge(np.zeros((2, 16, 16, 3), np.uint8), CLOTHES, [0, 1]).any()
    assert judge.failures == 2 and judge.describe()["failures"] == 2
    # A rendered scene gets one field per object slot.
    scene = scenes.Scene()
    model = FakeModel([{"shape": "square", "colour": "red", "position": "top left"}])
    np.testing.assert_array_equal(judges.LlmJudge(model).judge(x, scene, [0]), [[True, True, True]])


def test_the_llm_judge_refuses_in_one_line_without_package_or_key(no_llm):
    with pytest.raises(UsageError, match="needs the llm package") as e:
        judges.LlmJudge("gemini-2.0-flash")
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match="needs the llm package"):
        judges.make("llm")

    class NeedsKeyException(Exception):
        pass

    with pytest.raises(UsageError, match="needs an API key"):
        judges.LlmJudge(FakeModel([NeedsKeyException("No key found")])).judge(
            np.zeros((1, 16, 16, 3), np.uint8), CLOTHES, [0])
    with pytest.raises(UsageError, match="unknown judge"):
        judges.make("oracle")
