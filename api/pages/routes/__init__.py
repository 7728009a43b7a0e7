"""The routers of the web pages (mounted by api.pages.install_pages)."""
