"""The models Glassbox ships: ``default`` (a small GPT trained by ``glassbox train-default``)
and ``worked-example`` (the article's toy, with the article's data in published.json).
A package only so that ``importlib.resources`` finds these folders wherever Glassbox is
installed (model/io/assets.py)."""
