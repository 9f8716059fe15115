"""Reserved token ids shared by the tokenizer, the model, the loss and the decoders."""

PAD_ID = 0
"""Padding; ignored by the loss and masked out of attention."""
UNK_ID = 1
"""Unknown piece (rare: the tokenizer falls back to bytes)."""
BOS_ID = 2
"""Start of sequence; first input of the decoder."""
EOS_ID = 3
"""End of sequence; appended to every source and target."""
