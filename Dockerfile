# The image every tulip-memory process runs from (workers, Flower, CLI).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tulip_memory ./tulip_memory
COPY tulip_wire ./tulip_wire
COPY tulip_producer ./tulip_producer
COPY tulip_workers ./tulip_workers
COPY tulip_ops ./tulip_ops
RUN pip install --no-cache-dir . && useradd --create-home tulip
USER tulip
ENV LITELLM_LOCAL_MODEL_COST_MAP=True
ENTRYPOINT ["tulip-memory"]
