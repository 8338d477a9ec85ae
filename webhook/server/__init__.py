"""Transport: AdmissionReview in and out, the Flask app, gunicorn over TLS, live policy and certificates, metrics."""
