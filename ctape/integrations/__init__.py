"""Agent-framework integrations, each an optional extra that imports its framework lazily.

- ``ctape.integrations.langgraph``: ``TapeSaver``, a LangGraph checkpointer
  (``pip install 'ctape[langgraph]'``)
- ``ctape.integrations.openai_agents``: ``TapeSession``, an OpenAI Agents SDK session
  (``pip install 'ctape[openai-agents]'``)
- ``ctape.integrations.pydantic_ai``: save and load pydantic-ai message history
  (``pip install 'ctape[pydantic-ai]'``)

Importing this package imports no framework; importing one of its modules imports that
module's framework only.
"""
