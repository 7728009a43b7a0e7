"""HTTP layer: FastAPI app, routers, schemas and dependencies. Never imports torch/triton."""
