"""Facts: what each host has, as gathered by Ansible and kept in the site's facts cache."""

from llmgw.facts.records import Filesystem, Gpu, HostFacts, IbAdapter, IbPort, Unit, Weights

__all__ = ["Filesystem", "Gpu", "HostFacts", "IbAdapter", "IbPort", "Unit", "Weights"]
