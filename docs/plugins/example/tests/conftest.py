"""Shared fixtures: a plugin host that holds only this plugin and the scripted model."""

from __future__ import annotations

from collections.abc import Iterator

import koboi_example_weather.plugin
import pytest

import koboi_scripted.plugin
from koboi import PluginHost
from koboi.plugins import use_host


@pytest.fixture
def host() -> Iterator[PluginHost]:
    # load_entry_points=False: the test sees exactly these plugins, whatever else
    # is installed; strict=True: any registration problem fails the test. use_host
    # makes it the default host, which the plugin's factories collect stations from.
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    host.add_plugin(koboi_example_weather.plugin, "weather", dist="koboi-example-weather")
    with use_host(host):
        yield host
