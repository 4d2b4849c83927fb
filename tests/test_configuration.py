"""`params.Configuration`: the one record a parallel configuration is between modules, checked
once, printed one way (`text`) and read back by the one parser (`Configuration.parse`)."""
import pickle
import re

import pytest

from layoutalg.errors import ConfigError, LayoutalgError
from layoutalg.params import CONFIG_NAMES, DEFAULTS, MOVES_WITH_THE_GROUP, PARALLEL, Configuration, parse_config


@pytest.mark.parametrize("text, also", [
    ("tp=2", ()),
    ("tp=4,dcp=2,interleave=2", ()),
    ("tp=2,pcp=2,pcp_replicas=1", ()),
    ("pp=2,tp=2,block_size=64", ("block_size", "pp")),
    ("tp=1,pp=3+5", ("pp",)),
    ("tp=1024,pcp=64,dcp=64,interleave=1024,pp=64", ("pp",)),
])
def test_the_text_reads_back_as_the_configuration(text, also):
    c = Configuration.parse(text, also=also)
    assert Configuration.parse(c.text, also=also) == c
    assert Configuration(c) == c and pickle.loads(pickle.dumps(c)) == c and c.copy() == c
    assert {**c} == dict(c) and all(getattr(c, n) == c[n] for n in CONFIG_NAMES)


def test_the_others_are_at_their_defaults_and_the_text_is_the_messages():
    c = Configuration.parse("tp=2,dcp=4")
    assert c == {"tp": 2, "pcp": 1, "dcp": 4, "interleave": 1, "pcp_replicas": 0} == {**DEFAULTS, "tp": 2, "dcp": 4}
    assert c.text == "tp=2,pcp=1,dcp=4,interleave=1,pcp_replicas=0"  # (as the reshard prover's messages print it)
    assert c.joined(", ") == "tp=2, pcp=1, dcp=4, interleave=1, pcp_replicas=0"
    assert "pp" not in c and c.pp == 1 and c.split == ()
    assert parse_config("tp=2,dcp=4") == c and isinstance(parse_config("tp=2"), Configuration)
    assert Configuration(tp=2).text == "tp=2" and Configuration(tp=2).pcp_replicas == 0


def test_pp_as_stages_or_as_each_stages_layers():
    c = Configuration.parse("tp=2,pp=3+5", also=("pp",))
    assert (c["pp"], c.pp, c.split) == (2, 2, (3, 5)) and c.text.endswith(",pp=3+5")
    even = Configuration.parse("tp=2,pp=2", also=("pp",))
    assert c != even and c == dict(even)  # (a split is part of the record, not of the dict)
    assert c.without("pp") == Configuration.parse("tp=2") and c.without("pp").split == ()
    plain = Configuration.parse("tp=2,pp=4", also=("pp",))
    assert (plain.pp, plain.split, plain.text.endswith(",pp=4")) == (4, (), True)
    with pytest.raises(ConfigError, match="NAME one of tp, pcp, dcp, interleave, pcp_replicas, got 'pp=2'"):
        Configuration.parse("tp=2,pp=2")  # only where a caller takes it


@pytest.mark.parametrize("items, said", [
    ({"tp": True}, "tp must be a whole number, got True"),
    ({"tp": 2.0}, "tp must be a whole number, got 2.0"),
    ({"dcp": "2"}, "dcp must be a whole number, got '2'"),
    ({"tp": 0}, "tp = 0, expected at least 1"),
    ({"pcp": -2}, "pcp = -2, expected at least 1"),
    ({"pcp_replicas": -1}, "pcp_replicas = -1, expected at least 0"),
    ({"tp": 2048}, r"tp = 2048 is outside the proved domain \[1, 1024\]"),
    ({"interleave": 1025}, r"interleave = 1025 is outside the proved domain \[1, 1024\]"),
    ({"block_size": 8192}, r"block_size = 8192 is outside the proved domain \[1, 4096\]"),
    ({"pp": 0}, "pp = 0, expected at least 1"),
    ({"cp": 2}, "'cp' is no name of a configuration"),
])
def test_each_refusal_names_the_name_and_the_value(items, said):
    with pytest.raises(ConfigError, match=said):
        Configuration(items)


@pytest.mark.parametrize("text, said", [
    ("tp=true", "tp must be a whole number, got 'true'"),
    ("tp=2.0", r"tp must be a whole number, got '2.0'"),
    ("tp=0", "tp = 0, expected at least 1"),
    ("dcp=-1", "dcp = -1, expected at least 1"),
    ("pcp_replicas=-1", "pcp_replicas = -1, expected at least 0"),
    ("tp=2048", r"tp = 2048 is outside the proved domain \[1, 1024\]"),
    ("tp=2,pp=0", "pp = 0, expected at least 1"),
    ("tp=2,pp=65", r"pp = 65 is outside the proved domain \[1, 64\]"),
    ("tp=2,pp=3+0", "pipeline split 3\\+0: stage 1 owns no layer"),
    ("tp=2,pp=x", r"pp must be a number of stages \(pp=2\) or each stage's layer count \(pp=3\+5\), got 'pp=x'"),
    ("tp=2,pp=-1", "pp must be a number of stages"),
    ("tp=2,tp=4", "tp is given twice"),
    ("pp=2,tp=2,pp=3", "pp is given twice"),
    ("tp", "expected NAME=VALUE items"),
    ("", "no NAME=VALUE item"),
])
def test_each_refusal_of_a_text_quotes_it_and_names_the_name_and_the_value(text, said):
    with pytest.raises(ConfigError, match=re.escape(f"configuration {text!r}: ") + said):
        Configuration.parse(text, also=("pp",))


def test_a_split_is_one_whole_number_a_stage():
    assert Configuration(tp=1, pp=2, split=(1, 3)).text == "tp=1,pp=1+3"
    with pytest.raises(ConfigError, match="pipeline split 1\\+3: one whole number a stage, for pp = 3 stages"):
        Configuration(tp=1, pp=3, split=(1, 3))
    with pytest.raises(ConfigError, match="stage 0 owns no layer"):
        Configuration(tp=1, pp=2, split=(0, 3))


def test_the_name_lists_are_views_of_one_table():
    assert CONFIG_NAMES == ("tp", "pcp", "dcp", "interleave", "pcp_replicas") == tuple(DEFAULTS)
    assert PARALLEL == ("tp", "pcp", "dcp", "interleave", "total_heads")
    assert MOVES_WITH_THE_GROUP == ("tp", "pcp", "dcp", "interleave", "heads", "pp")


def test_the_reshard_command_reads_pp_as_before():
    """`layoutalg reshard`'s sides: pp=N splits the layers by vLLM's rule, pp=3+5 gives each
    stage's count, and for a stage grid's family pp is a size of the page (as
    test_stage_pages and test_pipeline see end to end)."""
    from layoutalg.cli.reshard import _side
    config, stages = _side("pp=2,tp=2,block_size=4", 3)
    assert config == {"tp": 2, "pcp": 1, "dcp": 1, "interleave": 1, "pcp_replicas": 0, "block_size": 4}
    assert isinstance(config, Configuration) and list(map(list, stages)) == [[0, 1], [2]]
    config, stages = _side("pp=1+2,tp=1,block_size=2", 3)
    assert "pp" not in config and list(map(list, stages)) == [[0], [1, 2]]
    config, stages = _side("tp=2,pp=2", 3, staged=True)
    assert (config.pp, config["pp"], list(map(list, stages))) == (2, 2, [[0, 1, 2]])
    assert _side("tp=2", 3) == ({**DEFAULTS, "tp": 2}, (range(3),))
    with pytest.raises(LayoutalgError, match="pp is its number of stages \\(pp=2\\), got 'pp=1\\+3'"):
        _side("tp=2,pp=1+3", 4, staged=True)
    with pytest.raises(ConfigError, match="its stages must own at least one layer each and 4 layers in all, got 5"):
        _side("tp=2,pp=2+3", 4)
    with pytest.raises(ConfigError, match="pp = 5: a pipeline of 4 layers has 1 to 4 stages"):
        _side("tp=2,pp=5", 4)
    with pytest.raises(ConfigError, match="'tp=2,pp=2,pp=3': pp is given twice"):
        _side("tp=2,pp=2,pp=3", 4)


def test_a_group_holds_a_configuration():
    from layoutalg.tools.distributed import group_of
    g = group_of("split_nhd", {"tp": 2, "pcp": 1, "dcp": 1, "interleave": 1, "pcp_replicas": 0}, 4, 4, 16, "fp16", 2)
    assert isinstance(g.config, Configuration) and g.config.text == "tp=2,pcp=1,dcp=1,interleave=1,pcp_replicas=0"
    with pytest.raises(ConfigError, match="tp = 0, expected at least 1"):
        group_of("split_nhd", {"tp": 0}, 4, 4, 16, "fp16", 2)
