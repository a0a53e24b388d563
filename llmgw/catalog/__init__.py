"""The catalog: which models the fleet serves, and how each may be run."""

from llmgw.catalog.load import Catalog, Located, load_catalog
from llmgw.catalog.routes import LocatedRoute
from llmgw.catalog.schema import (
    CAPABILITIES,
    Model,
    Profile,
    Route,
    Scaling,
    adapter_profiles,
    format_duration,
    parse_duration,
    profile_adapters,
)

__all__ = ["CAPABILITIES", "Catalog", "Located", "LocatedRoute", "Model", "Profile", "Route", "Scaling",
           "adapter_profiles", "format_duration", "load_catalog", "parse_duration", "profile_adapters"]
