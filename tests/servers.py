"""Start real local model servers for tests (127.0.0.1 only) and stop them by process group.

The launcher lives in rag/servers.py so that benchmarks run through the installed `lorarag`
script can use it too; this module keeps the tests' import path.
"""

from lorarag.rag.servers import free_port, launched, swift_deploy_cmd, vllm_server_cmd

__all__ = ["free_port", "launched", "swift_deploy_cmd", "vllm_server_cmd"]
