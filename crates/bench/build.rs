//! Generate the gRPC baseline's messages and service from `proto/accel.proto`
//! with a pure-Rust protobuf compiler (protox): no `protoc` needed for this
//! crate. The descriptor set is kept for the server's reflection service.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/accel.proto");
    let fds = protox::compile(["accel.proto"], ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("accel_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_build::configure().compile_fds(fds)?;
    Ok(())
}
