"""The text readers on the real shared files and on fixtures written in each set's official on-disk format."""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import SHARED, require_shared
from cutlab.core.data.text import shuffled, split_sizes
from cutlab.core.data.text_readers import _mnli_hf_split, read_imdb, read_mnli
from cutlab.errors import CutlabError

IMDB = SHARED / "data" / "imdb"
MNLI = SHARED / "data" / "mnli"
# GLUE's MNLI TSV header (dev_matched.tsv); train.tsv has label1 and gold_label only
GLUE_HEADER = ("index promptID pairID genre sentence1_binary_parse sentence2_binary_parse sentence1_parse "
               "sentence2_parse sentence1 sentence2 label1 label2 label3 label4 label5 gold_label").split()


def test_imdb_json_lines_real_tiny_split():
    rows = read_imdb(str(require_shared(IMDB)), "train", "imdb_train_tiny100.jsonl")
    assert len(rows) == 100 and sorted({label for _, _, label in rows}) == [0, 1]
    assert sum(label for _, _, label in rows) == 50 and all(pair is None for _, pair, _ in rows)
    assert rows[0][0].startswith("Zentropa has much in common with The Third Man")


@pytest.mark.slow
def test_imdb_full_gzip_splits():
    rows = read_imdb(str(require_shared(IMDB)), "test", "imdb_test.jsonl.gz")
    assert len(rows) == 25_000 and sum(label for _, _, label in rows) == 12_500


def write_acl_imdb(root):
    for split in ("train", "test"):
        for polarity, rating in (("pos", 9), ("neg", 2)):
            folder = root / "aclImdb" / split / polarity
            folder.mkdir(parents=True)
            for number in range(2):
                (folder / f"{number}_{rating}.txt").write_text(f"A {polarity} review {number}.<br /><br />The end.")
    (root / "aclImdb" / "imdb.vocab").write_text("the\n")


def test_imdb_official_acl_layout(tmp_path):
    write_acl_imdb(tmp_path)
    for root in (tmp_path, tmp_path / "aclImdb"):  # the download folder or aclImdb/ itself
        rows = read_imdb(str(root), "test", "unused.jsonl")
        assert [label for _, _, label in rows] == [0, 0, 1, 1]
    # the same reviews as JSON lines read as the same text: the folder's reader turned <br /> into spaces, which
    # the JSON lines (and hf:imdb) keep, so one data set gave two texts and two results
    (tmp_path / "test.jsonl").write_text("".join(json.dumps({"text": text, "label": label}) + "\n"
                                                 for text, _, label in rows))
    assert rows[2][0] == "A pos review 0.<br /><br />The end."
    assert read_imdb(str(tmp_path), "test", "test.jsonl") == rows


def test_imdb_wrong_layout_and_bad_rows_name_the_fix(tmp_path):
    (tmp_path / "train").mkdir()
    with pytest.raises(CutlabError, match=r"not an IMDb folder.*aclImdb/\{train,test\}/\{pos,neg\}.*found train/"):
        read_imdb(str(tmp_path), "train", "imdb_train.jsonl.gz")
    with gzip.open(tmp_path / "imdb_train.jsonl.gz", "wt") as handle:
        handle.write(json.dumps({"text": "fine", "label": 1}) + "\n" + json.dumps({"text": "odd", "label": 3}) + "\n")
    with pytest.raises(CutlabError, match=r"imdb_train.jsonl.gz:2: IMDb label must be 0 \(negative\) or 1"):
        read_imdb(str(tmp_path), "train", "imdb_train.jsonl.gz")
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(CutlabError, match="broken.jsonl:1 is not valid JSON"):
        read_imdb(str(tmp_path), "train", "broken.jsonl")


def test_text_files_that_are_not_utf8_or_not_whole_gzip_or_rows_without_a_string_are_one_line(tmp_path):
    """Each was a traceback (UnicodeDecodeError, gzip.BadGzipFile, EOFError, the tokenizer's TypeError)."""
    rows = "".join(json.dumps({"text": f"review {i} " * 50, "label": i % 2}) + "\n" for i in range(200))
    (tmp_path / "latin.jsonl").write_bytes(rows.encode() + "{\"text\": \"caf\u00e9\", \"label\": 1}\n".encode("latin-1"))
    with pytest.raises(CutlabError, match=r"latin.jsonl is not UTF-8 text \(invalid continuation byte, from line "
                                          r"\d+ on\); save it as UTF-8"):
        read_imdb(str(tmp_path), "train", "latin.jsonl")
    (tmp_path / "fake.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(CutlabError, match=r"fake.jsonl.gz is not a whole gzip file \(Not a gzipped file"):
        read_imdb(str(tmp_path), "train", "fake.jsonl.gz")
    whole = gzip.compress(rows.encode())
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CutlabError, match=r"cut.jsonl.gz is not a whole gzip file \(Compressed file ended"):
        read_imdb(str(tmp_path), "train", "cut.jsonl.gz")
    (tmp_path / "null.jsonl").write_text(json.dumps({"text": "fine", "label": 1}) + "\n"
                                         + json.dumps({"text": None, "label": 0}) + "\n")
    with pytest.raises(CutlabError, match=r"null.jsonl:2: 'text' must be a string, got None"):
        read_imdb(str(tmp_path), "train", "null.jsonl")
    (tmp_path / "pairs.jsonl").write_text(json.dumps({"premise": "a", "hypothesis": 7, "label": 0}) + "\n")
    with pytest.raises(CutlabError, match=r"pairs.jsonl:1: 'hypothesis' must be a string, got 7"):
        read_mnli(str(tmp_path), "train", "pairs.jsonl")
    write_acl_imdb(tmp_path / "acl")
    next((tmp_path / "acl" / "aclImdb" / "test" / "pos").glob("*.txt")).write_bytes(b"caf\xe9")
    with pytest.raises(CutlabError, match=r"\.txt is not UTF-8 text"):
        read_imdb(str(tmp_path / "acl"), "test", "unused.jsonl")


@pytest.mark.parametrize("row, kind", [('["text", "label"]', "list"), ('"a review"', "str"), ("5", "int"),
                                        ("null", "NoneType")])
def test_a_json_line_that_is_not_an_object_is_one_line(tmp_path, row, kind):
    """Each was a TypeError or AttributeError's traceback from inside the reader, for IMDb and MNLI alike."""
    good = json.dumps({"text": "fine", "label": 1, "premise": "p", "hypothesis": "h"})
    (tmp_path / "rows.jsonl").write_text(f"{good}\n{row}\n")
    for read in (read_imdb, read_mnli):
        with pytest.raises(CutlabError, match=rf"rows.jsonl:2 is a JSON {kind}, not an object; the file must hold one "
                                              r"JSON object a line, with its fields named$"):
            read(str(tmp_path), "train", "rows.jsonl")


def test_mnli_from_hugging_face_reads_the_test_set_its_test_file_names():
    """With hf:glue/mnli the test was always validation_matched, whatever data.test_file named: an evaluation
    asked of the mismatched set scored the matched one under the mismatched one's name."""
    assert _mnli_hf_split("train", "train.tsv") == "train"
    assert _mnli_hf_split("test", "dev_matched.tsv") == "validation_matched"
    assert _mnli_hf_split("test", "dev_mismatched.tsv") == "validation_mismatched"
    assert _mnli_hf_split("test", "multinli_1.0_dev_mismatched.jsonl") == "validation_mismatched"
    with pytest.raises(CutlabError, match=r"data.test_file=test.tsv names neither MNLI test set; with "
                                          r"data.root=hf:glue/mnli set data.test_file=dev_matched.tsv"):
        _mnli_hf_split("test", "test.tsv")


def test_imdb_labels_beyond_two_are_refused_naming_data_num_labels_which_reads_them(tmp_path):
    # the refusal said only that IMDb labels are 0 or 1, with no way to train on text of more classes
    (tmp_path / "three.jsonl").write_text("".join(json.dumps({"text": f"review {i}", "label": i}) + "\n" for i in range(3)))
    with pytest.raises(CutlabError, match=r"three.jsonl:3: IMDb label must be 0 \(negative\) or 1 \(positive\), got 2; "
                                          r"for text of more classes \(labels 0 .. N-1\) train with data.num_labels=N "
                                          r"\(a model trained on 2 classes cannot score it\)$"):
        read_imdb(str(tmp_path), "train", "three.jsonl")
    assert [label for _, _, label in read_imdb(str(tmp_path), "train", "three.jsonl", num_labels=3)] == [0, 1, 2]
    (tmp_path / "four.jsonl").write_text(json.dumps({"text": "review", "label": 3}) + "\n")
    # cutlab-eval reads with its run's num_labels: "set data.num_labels" sent its user to a refusal
    with pytest.raises(CutlabError, match=r"four.jsonl:1: label must be 0 .. 2 \(data.num_labels=3\), got 3; train "
                                          r"with data.num_labels set to the number of classes \(a model trained on 3 "
                                          r"cannot score more\)$"):
        read_imdb(str(tmp_path), "train", "four.jsonl", num_labels=3)


def test_hugging_face_source_without_datasets_says_how_to_install(tmp_path):
    try:
        import datasets  # noqa: F401
        pytest.skip("datasets is installed here")
    except ImportError:
        pass
    with pytest.raises(CutlabError, match="pip install datasets"):
        read_imdb("hf:imdb", "train", "unused")


def test_mnli_real_rows_skip_unlabelled_and_map_labels():
    rows = read_mnli(str(require_shared(MNLI)), "train", "mnli_tiny.jsonl")
    assert len(rows) == 56  # 61 rows, 5 unlabelled test rows
    assert all(pair for _, pair, _ in rows)
    first = rows[0]
    assert first[0].startswith("Conceptually cream skimming") and first[2] == 1  # neutral


def test_mnli_glue_tsv_and_multinli_jsonl(tmp_path):
    lines = ["\t".join(GLUE_HEADER)]
    for index, (label, gold) in enumerate([("neutral", "neutral"), ("contradiction", "contradiction"), ("entailment", "entailment")]):
        fields = [str(index), "1", f"{index}e", "fiction", "(", "(", "(", "(", f"premise {index}", f'hypothesis "{index}',
                  label, label, label, label, label, gold]
        lines.append("\t".join(fields))
    (tmp_path / "dev_matched.tsv").write_text("\n".join(lines) + "\n")
    rows = read_mnli(str(tmp_path), "test", "dev_matched.tsv")
    assert rows == [("premise 0", 'hypothesis "0', 1), ("premise 1", 'hypothesis "1', 2), ("premise 2", 'hypothesis "2', 0)]
    multinli = [{"sentence1": "p", "sentence2": "h", "gold_label": "contradiction"},
                {"sentence1": "p2", "sentence2": "h2", "gold_label": "-"}]  # no consensus: GLUE drops it too
    (tmp_path / "multinli_1.0_dev_matched.jsonl").write_text("".join(json.dumps(r) + "\n" for r in multinli))
    assert read_mnli(str(tmp_path), "test", "multinli_1.0_dev_matched.jsonl") == [("p", "h", 2)]


def test_mnli_tsv_labels_written_as_glue_indices_read_as_glue_names_them(tmp_path):
    """A TSV exported from GLUE or Hugging Face holds 0/1/2 in its label column, read as text: "0" was refused with
    a message that said 0, 1, 2 are accepted. They now read as GLUE's (and hf:glue/mnli's) 0 entailment, 1 neutral,
    2 contradiction; an unlabelled test row's "-1" is skipped, as the number -1 is."""
    rows = [("p0", "h0", "0"), ("p1", "h1", " 1"), ("p2", "h2", "2"), ("p3", "h3", "-1")]
    (tmp_path / "train.tsv").write_text("sentence1\tsentence2\tlabel\n" + "".join("\t".join(r) + "\n" for r in rows))
    assert read_mnli(str(tmp_path), "train", "train.tsv") == [("p0", "h0", 0), ("p1", "h1", 1), ("p2", "h2", 2)]
    by_name = [{"premise": "p", "hypothesis": "h", "label": name} for name in ("entailment", "neutral", "contradiction")]
    (tmp_path / "names.jsonl").write_text("".join(json.dumps(row) + "\n" for row in by_name))
    assert [label for _, _, label in read_mnli(str(tmp_path), "train", "names.jsonl")] == [0, 1, 2]
    (tmp_path / "dev_matched.tsv").write_text("sentence1\tsentence2\tlabel\np\th\t3\n")
    with pytest.raises(CutlabError, match=r"dev_matched.tsv:2: MNLI label must be one of entailment, neutral, "
                                          r"contradiction \(or 0, 1, 2\), got '3'$"):
        read_mnli(str(tmp_path), "test", "dev_matched.tsv")


def test_an_imdb_label_written_as_a_string_is_refused_for_its_type_naming_the_fix(tmp_path):
    """A label "1" was refused as out of range ("must be 0 .. 2, got '1'") and sent its user to data.num_labels,
    which cannot help: its type is what is wrong."""
    (tmp_path / "rows.jsonl").write_text(json.dumps({"text": "review", "label": "1"}) + "\n")
    for num_labels in (2, 3):
        with pytest.raises(CutlabError, match=r"rows.jsonl:1: label must be a number, got the string '1'; write it "
                                              r"as a number \(\"label\": 1\)$"):
            read_imdb(str(tmp_path), "train", "rows.jsonl", num_labels=num_labels)
    (tmp_path / "rows.jsonl").write_text(json.dumps({"text": "review", "label": "positive"}) + "\n")
    with pytest.raises(CutlabError, match=r"rows.jsonl:1: label must be a number, got the string 'positive'; write "
                                          r"it as a number, 0 .. 1 \(\"label\": 0\)$"):
        read_imdb(str(tmp_path), "train", "rows.jsonl")


def test_an_imdb_label_written_as_a_boolean_is_refused_for_its_type_naming_the_fix(tmp_path):
    """A label true was refused as out of range ("must be 0 .. 2, got True") and sent its user to data.num_labels,
    which cannot help: its type is what is wrong, as for a string."""
    for written, number in (("true", 1), ("false", 0)):
        (tmp_path / "rows.jsonl").write_text('{"text": "review", "label": %s}\n' % written)
        for num_labels in (2, 3):
            with pytest.raises(CutlabError, match=rf"rows.jsonl:1: label must be a number, got the boolean {written}; "
                                                  rf"write it as a number, 0 .. {num_labels - 1} "
                                                  rf"\(\"label\": {number}\)$"):
                read_imdb(str(tmp_path), "train", "rows.jsonl", num_labels=num_labels)


def test_mnli_label_outside_three_classes_names_the_row(tmp_path):
    (tmp_path / "train.tsv").write_text("\t".join(GLUE_HEADER[:10] + ["gold_label"]) + "\n"
                                        + "\t".join(["0"] * 8 + ["a", "b", "maybe"]) + "\n")
    with pytest.raises(CutlabError, match=r"train.tsv:2: MNLI label must be one of entailment, neutral, contradiction.*'maybe'"):
        read_mnli(str(tmp_path), "train", "train.tsv")
    with pytest.raises(CutlabError, match=r"has no MNLI file dev_matched.tsv.*found train.tsv"):
        read_mnli(str(tmp_path), "test", "dev_matched.tsv")


def test_validation_split_and_subsets():
    assert split_sizes(100, 0.1, None) == (10, 90)
    assert split_sizes(100, 8, 20) == (8, 20)
    assert split_sizes(10, 0.99, None) == (9, 1)  # always one of each
    assert split_sizes(100, 20, 500) == (20, 80)  # train_subset: at most that many
    with pytest.raises(CutlabError, match=r"data.val_size=100 holds out the whole training pool of 100 rows, leaving "
                                          r"none to train on; give a count of at most 99, or a fraction such as 0.1"):
        split_sizes(100, 100, 16)  # it trained on one review
    rows = [(str(i), None, i % 2) for i in range(50)]
    assert shuffled(rows, 0) == shuffled(rows, 0) and shuffled(rows, 0) != shuffled(rows, 1)
    assert sorted(shuffled(rows, 0)) == sorted(rows)


@pytest.mark.parametrize("key, value, expected", [("max_length", 1, "data.max_length must be a whole number >= 2"),
                                                  ("val_size", 1.5, "data.val_size must be a fraction in (0, 1)"),
                                                  ("train_subset", "all", "e.g. data.train_subset=2000")])
def test_text_data_keys_are_checked_with_an_example(key, value, expected):
    from omegaconf import OmegaConf

    from cutlab.config.text_data import check_text_data

    data = OmegaConf.create({"max_length": 128, "num_labels": 2, "train_subset": None, "test_subset": None,
                             "subset_seed": 0, "val_size": 0.1})
    check_text_data(data)
    data[key] = value
    with pytest.raises(CutlabError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        check_text_data(data)
