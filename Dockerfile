# The image every tulip-memory process runs from (workers, Flower, CLI).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md celeryconfig.py ./
COPY tulip_memory ./tulip_memory
COPY producer ./producer
COPY workers ./workers
RUN pip install --no-cache-dir . && useradd --create-home tulip
USER tulip
ENV LITELLM_LOCAL_MODEL_COST_MAP=True
ENTRYPOINT ["tulip-memory"]
