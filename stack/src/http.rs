//! HTTP/1.1 framing over smoltcp TCP sockets (placeholder, being written).
