"""A page for tests/test_browser.py: hostile strings shown through app.components.labels.plain,
in an error box and inside Markdown, for the browser's own renderer to be checked against."""

import streamlit as st

from glassbox.app.components.labels import plain

HOSTILE = [
    "![pix](http://127.0.0.1:9/pixel.png)",
    "[Session expired, log in again](http://evil.example/login)",
    "see http://evil.example/x and HTTPS://EVIL.EXAMPLE/Y",
    "www.evil.example WWW.EVIL.EXAMPLE",
    "a@evil.example mailto:a@evil.example xmpp:a@evil.example",
    "<https://autolink.evil.example>",
    "<img src=x onerror=alert(1)> <a href='http://evil.example'>x</a> <b>bold</b> <script>alert(1)</script>",
    ":smile: :material/home: :streamlit: :red[red] :blue-background[b]",
    "$x^2$ and $$y$$ and \\(z\\)",
    "# heading",
    "- item\n- item",
    "1. one\n2. two",
    "> quote",
    "`code` ```fence```",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "**bold** _it_ ~~strike~~",
    "[^1]\n\n[^1]: note",
    "https://evil.example/a_(b)?c=d&e=f#g",
    "ftp://files.evil.example/x",
    "\\*not bold\\*",
    "&lt;b&gt; &amp; &#60;",
    "~/.ssh/../../etc/passwd",
    "C:\\Users\\x",
]

if __name__ == "__main__":  # streamlit runs a script as __main__; the test imports HOSTILE
    for text in HOSTILE:
        st.error(plain(text))
        st.markdown("**before** " + plain(text) + " **after**")
