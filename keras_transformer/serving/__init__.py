"""Serving a trained model: SavedModel exports (text in, text out, warm-up records, provenance)
and their loading, the CTranslate2 export, and translating text through any of them."""
