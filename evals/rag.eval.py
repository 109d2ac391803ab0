"""The RAG demo (configs/rag_demo.yaml): answers come from the shop's documents, found
by rag__search and added as context, with the retrievals journaled and checked.

Its model is already the scripted one, so these cases need no mock= to run under --mock.
"""

from __future__ import annotations

from koboi_eval import called_tool, case, completed, output_contains, plugin_check

RAG_DEMO = "../configs/rag_demo.yaml"

case(
    "finds how to return a widget",
    config=RAG_DEMO,
    input="How do I return a widget?",
    expect=[
        called_tool("rag__search", times=1),
        plugin_check("retrieved_chunk", "return label", source="returns.md", via="tool", top=1),
        plugin_check("retrieved_chunk", "return label", via="context"),
        output_contains("post office"),
        completed(),
    ],
)

case(
    "finds the support hours",
    config=RAG_DEMO,
    input="When is support open?",
    expect=[
        plugin_check("retrieved_chunk", "Monday to Friday", source="support.txt"),
        completed(),
    ],
)
