"""Renders what stats computed: Markdown, HTML (with SVG plots), CSV, JSON."""
