"""Models trained elsewhere, in: each foreign format read into our `TransformerConfig`, weights
and tokenizer once (one module a format), and written as a run directory that every command
takes like one kt-train wrote. Nothing downstream knows where a model came from but its
provenance (`import.json`)."""
