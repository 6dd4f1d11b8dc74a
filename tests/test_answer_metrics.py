"""Answer metrics: SQuAD normalisation in en/zh/fr, contains-gold, sacrebleu and rouge-score references."""

from __future__ import annotations

import math

import pytest

from lorarag.eval import answer_metrics as am
from tests.eval_fixtures import make_item


def test_squad_english_matches_official_normalisation():
    # SQuAD v1.1 evaluate.py: lower, drop punctuation, drop a/an/the, squeeze spaces.
    assert am.normalize_text("The  Eiffel-Tower!", "en") == "eiffeltower"
    assert am.exact_match("the Eiffel Tower.", ["Eiffel Tower"], "en") == 1.0
    # F1("eiffel tower in paris", "eiffel tower"): P = 2/4, R = 2/2 -> 2/3
    assert am.token_f1("Eiffel Tower in Paris", ["a tower", "Eiffel Tower"], "en") == pytest.approx(2 / 3)


def test_chinese_is_character_level():
    assert am.tokenize("北京市，中国。", "zh") == ["北", "京", "市", "中", "国"]
    # pred 北京市 (3 chars) vs gold 北京 (2): overlap 2 -> P 2/3, R 1 -> F1 0.8
    assert am.token_f1("北京市", ["北京"], "zh") == pytest.approx(0.8)
    assert am.exact_match("北京。", ["北京"], "zh") == 1.0
    assert am.contains_gold("答案是北京。", ["北京"], "zh")
    # Full-width digits fold to ASCII (NFKC), mixed tokens split at the CJK boundary.
    assert am.tokenize("２０２４年", "zh") == ["2024", "年"]


def test_french_keeps_accents_and_articles():
    assert am.normalize_text("La Comédie-Française", "fr") == "la comédiefrançaise"
    assert am.exact_match("la Seine", ["Seine"], "fr") == 0.0  # no article stripping outside en
    assert am.exact_match("été", ["ete"], "fr") == 0.0  # accents kept
    # F1("la seine", "seine"): P 1/2, R 1 -> 2/3
    assert am.token_f1("la Seine", ["Seine"], "fr") == pytest.approx(2 / 3)


def test_contains_gold_is_at_token_boundaries():
    assert am.contains_gold("The speed limit is 50 km/h.", ["50 km/h"], "en")
    assert not am.contains_gold("The speed limit is 150 km/h.", ["50 km/h"], "en")
    assert not am.contains_gold("anything", [], "en")
    assert not am.contains_gold("anything", ["..."], "en")  # a gold that normalises to nothing


def test_bleu_equals_sacrebleu_on_pre_split_characters():
    sacrebleu = pytest.importorskip("sacrebleu")
    hyp, ref = "机动车在高速公路上行驶", "机动车在高速公路上正常行驶"
    # The zh tokenizer splits Chinese characters; the same text pre-spaced with no tokenizer
    # must score the same (a default 13a run would see one "word" and score near 0).
    want = sacrebleu.sentence_bleu(" ".join(hyp), [" ".join(ref)], tokenize="none").score / 100
    assert am.bleu(hyp, [ref], "zh") == pytest.approx(want)
    assert want > 0.3
    en = sacrebleu.sentence_bleu("the cat sat on the mat", ["the cat is on the mat"]).score / 100
    assert am.bleu("the cat sat on the mat", ["the cat is on the mat"], "en") == pytest.approx(en)


def test_rouge_l_keeps_cjk_and_accents():
    from rouge_score import rouge_scorer

    # English: identical to rouge-score's own default tokenizer.
    default = rouge_scorer.RougeScorer(["rougeL"]).score("the cat is on the mat", "the cat sat on the mat")
    assert am.rouge_l("the cat sat on the mat", ["the cat is on the mat"], "en") == pytest.approx(default["rougeL"].fmeasure)
    # Chinese: pred 北京是首都 (5), ref 首都是北京 (5); LCS = 2 (北京 or 首都) -> F = 0.4.
    assert am.rouge_l("北京是首都", ["首都是北京"], "zh") == pytest.approx(0.4)
    # The default tokenizer drops CJK entirely and scores 0: the reason for our tokenizer.
    assert rouge_scorer.RougeScorer(["rougeL"]).score("首都是北京", "北京是首都")["rougeL"].fmeasure == 0.0
    # French with accents: pred "le café est fermé" vs ref "le café fermé": LCS 3, P 3/4, R 1 -> 6/7
    assert am.rouge_l("le café est fermé", ["le café fermé"], "fr") == pytest.approx(6 / 7)


def test_citation_accuracy_and_correctness():
    item = make_item(
        final_ids=("kb1", "kb9", "kb7"),
        final_texts=("x", "limit is 50 km/h", "y"),
        relevant_ids=("kb1",),
        gold_answers=("50 km/h",),
        cited=("S1", "S2", "S3"),
        bad_citations=("S9",),
    )
    # S1 relevant id, S2 contains the gold, S3 neither, S9 not given -> 2/4
    assert am.citation_accuracy(item) == pytest.approx(0.5)
    assert math.isnan(am.citation_accuracy(make_item(cited=(), bad_citations=())))
    assert am.is_correct(make_item(answer="It is 50 km/h", gold_answers=("50 km/h",)))
    assert not am.is_correct(make_item(answer="It is 50 km/h", gold_answers=("50 km/h",), abstained=True))
    assert am.is_correct(make_item(scenario="unanswerable", gold_answers=(), abstained=True))
    assert not am.is_correct(make_item(scenario="unanswerable", gold_answers=(), answer="12"))


def test_summary_abstention_rates():
    items = [
        make_item(qid="a", scenario="unanswerable", gold_answers=(), abstained=True),
        make_item(qid="b", scenario="unanswerable", gold_answers=(), abstained=False, answer="9"),
        make_item(qid="c", answer="50 km/h", gold_answers=("50 km/h",)),
        make_item(qid="d", answer="", gold_answers=("50 km/h",), abstained=True),
    ]
    s = am.answer_summary(items)
    assert s["abstain_correct"] == 0.5 and s["abstain_wrong"] == 0.5
    assert s["accuracy"] == 0.5
    assert s["exact_match"] == 0.5
