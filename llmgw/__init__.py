"""llmgw: declarative self-hosted LLM inference on GPU hosts, with Ansible and systemd."""

__version__ = "0.1.0"
