import configparser
from pathlib import Path

INI = Path("/app/service.ini")


def test_server_settings():
    config = configparser.ConfigParser()
    config.read(INI)
    assert config["server"]["port"] == "9090"
    assert config["server"]["debug"] == "false"


def test_nothing_else_changed():
    lines = INI.read_text().splitlines()
    assert lines[0] == "# service settings"
    assert "host = 0.0.0.0" in lines
    assert "port = 5432" in lines and "name = orders" in lines
    assert len(lines) == 9
