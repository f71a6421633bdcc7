"""Dataset cards: templates (``templates/*.md``, string.Template) and the renderer (``render``).

Installed as ``metashift_hf.cards``; the templates are package data read with importlib.resources.
"""
