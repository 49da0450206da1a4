import yaml

from stratctl.view.yamlout import dump_all


def test_strings_that_other_yaml_readers_take_for_numbers_are_quoted():
    values = ["123e4567", "1e10", "0x1F", "0o17", ".5", "012345678901", "yes", "off", "~", "", "0", "1_000"]
    text = dump_all([{"metadata": {"labels": {f"k{i}": v for i, v in enumerate(values)}}}])
    for i, v in enumerate(values):
        assert f"k{i}: '{v}'" in text, (v, text)
    assert yaml.safe_load(text)["metadata"]["labels"] == {f"k{i}": v for i, v in enumerate(values)}


def test_plain_strings_stay_plain_and_numbers_stay_numbers():
    text = dump_all([{"name": "demo-65f9181c1c", "hash": "65f9181c1ce6", "replicas": 2, "lr": 0.001}])
    assert "name: demo-65f9181c1c\n" in text
    assert "hash: 65f9181c1ce6\n" in text
    assert "replicas: 2\n" in text and "lr: 0.001\n" in text
