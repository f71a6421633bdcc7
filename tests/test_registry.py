"""The one registry idiom (core/registry.py)."""

import pytest

from metashift_hf.core.errors import MetashiftError, UnknownNameError
from metashift_hf.core.registry import Registry


def test_registry_keeps_order_refuses_twice_and_suggests():
    reg: Registry[type] = Registry("widget", "list them with `widgets`")

    @reg.register
    class Alpha:
        name = "alpha"

    @reg.register
    class Beta:
        name = "beta"

    assert reg.names() == ("alpha", "beta") and reg["alpha"] is Alpha and "beta" in reg and len(reg) == 2
    with pytest.raises(MetashiftError, match="registered twice"):
        reg.register(Alpha)
    with pytest.raises(UnknownNameError, match="did you mean 'alpha'") as e:
        reg.get("alpah")
    assert e.value.fix == "list them with `widgets`"
    with pytest.raises(MetashiftError, match="has no name"):
        reg.register(object())
