"""One module per provider; each offers ``prompter``, ``text_embedder`` and/or
``image_embedder``, building a picklable descriptor (see ``vane.ai.protocols``)."""
